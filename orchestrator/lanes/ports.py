"""Free loopback ports for lanes that share one host (process lanes, docker lanes on host networking)."""

from __future__ import annotations

import socket
import threading

_reserved: set[int] = set()
_lock = threading.Lock()


def _is_free(port: int, host: str = "127.0.0.1") -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host, port))
        except OSError:
            return False
    return True


def reserve_ports(count: int, start: int = 0, host: str = "127.0.0.1") -> list[int]:
    """``count`` ports free right now and not handed out before by this process.

    With ``start`` > 0 ports are searched upward from there (predictable numbers for humans);
    otherwise the kernel picks ephemeral ones.
    """
    ports: list[int] = []
    with _lock:
        candidate = start
        while len(ports) < count:
            if start:
                if candidate > 65535:
                    raise RuntimeError(f"no free port at or above {start}")
                port = candidate
                candidate += 1
            else:
                with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
                    s.bind((host, 0))
                    port = s.getsockname()[1]
            if port in _reserved or not _is_free(port, host):
                continue
            _reserved.add(port)
            ports.append(port)
    return ports


def release_ports(ports: list[int]) -> None:
    """Hand ``ports`` back: :func:`reserve_ports` may give them out again."""
    with _lock:
        for p in ports:
            _reserved.discard(p)
