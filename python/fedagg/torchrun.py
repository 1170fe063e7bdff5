"""python3 -m fedagg.torchrun ARGS: torchrun (torch.distributed.run) with the
same arguments, e.g.

    python3 -m fedagg.torchrun --standalone --nproc_per_node=2 train.py

Why: the torchrun of torch < 2.0 on Python 3.11 (Debian 12: torch 1.13,
/usr/bin/torchrun) stops before starting any worker with

    AttributeError: 'NoneType' object has no attribute 'get'   (in to_map)

because its Std.from_str("0") finds no member of value 0 (Python 3.11 no
longer iterates an IntFlag's zero or multi-bit members).  This module mends that one
function when it is broken and then runs torchrun itself; elsewhere it is
torchrun unchanged.
"""

import re
import sys


def mend_std_from_str():
    """Makes Std.from_str find every value ("0" NONE ... "3" ALL) where it
    returns None for some (Python 3.11 iterates neither an IntFlag's zero
    member nor its multi-bit ones).  Returns whether a fix was needed."""
    from torch.distributed.elastic.multiprocessing import api
    std = api.Std
    if all(std.from_str(v) is not None for v in ("0", "1", "2", "3")):
        return False

    def from_str(cls, vm):
        if re.match(api._VALUE_REGEX, vm):
            return cls(int(vm))
        if re.match(api._MAPPING_REGEX, vm):
            return {int(i): cls(int(v)) for i, v in (m.split(":") for m in vm.split(","))}
        raise ValueError("%s does not match: <%s> or <%s>"
                         % (vm, api._VALUE_REGEX, api._MAPPING_REGEX))

    std.from_str = classmethod(from_str)
    return True


def main(argv=None):
    mend_std_from_str()
    from torch.distributed.run import main as torchrun_main
    sys.argv[0] = "torchrun"
    torchrun_main(argv)


if __name__ == "__main__":
    main()
