"""The shell: the one effect executor, run by the server (over trio and the operating system)
and by the simulator, each through its own ``ShellIO``."""

from zabby.shell.executor import EffectExecutor as EffectExecutor, StagedSnap as StagedSnap, run_now as run_now
from zabby.shell.io import ShellIO as ShellIO
