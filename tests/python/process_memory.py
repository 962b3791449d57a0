"""What this process holds in memory, from /proc/self/smaps (Linux)."""
from __future__ import annotations


def mapped_rss_kb(path: str) -> int:
    """This process's resident kB of its mappings of `path`."""
    total, inside = 0, False
    with open("/proc/self/smaps") as f:
        for line in f:
            fields = line.split()
            if "-" in fields[0] and len(fields) >= 5:  # a mapping's header line
                inside = fields[-1] == path
            elif inside and fields[0] == "Rss:":
                total += int(fields[1])
    return total
