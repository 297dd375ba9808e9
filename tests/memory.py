"""The peak memory of this process's own address space (Linux).

Why not `resource.getrusage(...).ru_maxrss`: in a child started by `subprocess`, Linux folds the
parent's high-water mark into the child's maxrss at exec, so a child of a 4 GB pytest process
reports a 4 GB peak before it has done anything. VmHWM belongs to the address space the child
built after exec, and /proc/self/clear_refs can reset it.
"""


def status_mb(field):
    """A /proc/self/status memory field ("VmRSS", "VmHWM", ...) in MB."""
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith(field + ":")) / 1024


def peak_rss_mb():
    return status_mb("VmHWM")


def reset_peak():
    """Sets the peak (VmHWM) back to the current RSS, so the next peak counts only what follows."""
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")
