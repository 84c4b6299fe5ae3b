"""This process's resident set as Linux reports it, for the memory benchmarks' fresh child
processes: a field of ``/proc/self/status`` (``VmRSS``, ``VmHWM``) and a reset of the peak."""

from __future__ import annotations

__all__ = ["reset_peak", "status_kb"]


def status_kb(field: str) -> int:
    """Field ``field`` of ``/proc/self/status`` in kB (e.g. ``VmRSS``, ``VmHWM``).

    Raises
    ------
    OSError: no such file (not Linux) or no such field.
    """
    with open("/proc/self/status", encoding="ascii") as fh:
        for line in fh:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    raise OSError(f"{field} not in /proc/self/status")


def reset_peak() -> bool:
    """Reset this process's peak RSS (``VmHWM``) to its current RSS; whether that worked (Linux >= 4.0:
    writing 5 to ``/proc/self/clear_refs``)."""
    try:
        with open("/proc/self/clear_refs", "w", encoding="ascii") as fh:
            fh.write("5")
    except OSError:
        return False
    return True
