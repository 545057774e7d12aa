"""The server process drops Python 3.11's ``EnumType.__getattr__`` (``fast_enum_members``): enums
must behave as before, members named like the enum's own properties included."""

from __future__ import annotations

import subprocess
import sys
import textwrap


def test_enums_behave_alike_without_the_metaclass_hook() -> None:
    script = textwrap.dedent("""
        import enum
        from zabby.server.main import fast_enum_members
        from zabby.opcodes import OpCode
        from zabby.errors import Err

        class Odd(enum.Enum):
            name = 1
            value = 2
            plain = 3

        before = (OpCode.MULTI, OpCode(14), OpCode["MULTI"], Err.OK, Odd.name, Odd.value, Odd(3), list(Odd))
        fast_enum_members()
        assert "__getattr__" not in vars(enum.EnumType)
        after = (OpCode.MULTI, OpCode(14), OpCode["MULTI"], Err.OK, Odd.name, Odd.value, Odd(3), list(Odd))
        assert before == after, (before, after)
        assert Odd.name.value == 1 and Odd.value.name == "value"
        try:
            Odd.missing
        except AttributeError:
            pass
        else:
            raise AssertionError("a missing member was found")
        fast_enum_members()  # twice: nothing left to drop
        print("ok")
    """)
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0 and result.stdout.strip() == "ok", result.stderr
