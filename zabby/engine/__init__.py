"""The engine: one server's decisions, driven by the trio server and by the simulator."""

from zabby.engine.effects import (
    FLUSH_CLIENTS as FLUSH_CLIENTS,
    Append as Append,
    CheckSpace as CheckSpace,
    ClientSink as ClientSink,
    ClientsKept as ClientsKept,
    Clock as Clock,
    CloseClients as CloseClients,
    DropLinks as DropLinks,
    Effect as Effect,
    FailStop as FailStop,
    FlushClients as FlushClients,
    Freezer as Freezer,
    Install as Install,
    Pause as Pause,
    Persist as Persist,
    Purge as Purge,
    Reconfigure as Reconfigure,
    Recovered as Recovered,
    Reload as Reload,
    Send as Send,
    StageSnapshot as StageSnapshot,
    WriteSnapshot as WriteSnapshot,
)
from zabby.engine.engine import Engine as Engine, core_timing as core_timing
from zabby.engine.reconfig import logged_membership as logged_membership
