"""A throwaway OpenSSH server on a loopback port, for the tests of an SSH DVC remote.

:class:`SSHServer` runs the system's ``sshd`` (Debian: ``openssh-server``) as the current
user with its own configuration, a host key and a client key made for it, and a directory
that holds the remotes; nothing outside its directory is read or written, except that a
root user's ``sshd`` needs its privilege-separation directory (``/run/sshd``), made here
if missing, as the Debian package's service does. The client side gets a home directory
of its own (``home``, holding the client key), so the user's own ``~/.ssh`` (its config,
keys and agent) is never read.

:class:`Relay` is a TCP relay in front of it that can hold a transfer part-way, so that a
test can stop the server in the middle of a push or a pull.
"""

from __future__ import annotations

import getpass
import os
import shutil
import socket
import subprocess
import threading
import time
from pathlib import Path

SBIN = "/usr/sbin:/usr/local/sbin:/sbin"


class SSHUnavailable(RuntimeError):
    """``sshd`` is not installed or does not start here (the tests skip, with this reason)."""


class _PortTaken(RuntimeError):
    pass


def find_sshd() -> str | None:
    return shutil.which("sshd", path=f"{os.environ.get('PATH', '')}:{SBIN}")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def write_key(path: Path) -> str:
    """A new ed25519 key pair at ``path`` (OpenSSH format, 0600) and ``path.pub``;
    returns the public key line."""
    import asyncssh  # pinned with dvc-ssh (requirements.lock)

    key = asyncssh.generate_private_key("ssh-ed25519")
    key.write_private_key(str(path))
    path.chmod(0o600)
    key.write_public_key(str(path) + ".pub")
    return Path(str(path) + ".pub").read_text().strip()


class SSHServer:
    """``sshd`` on ``127.0.0.1:<port>``, public-key login for the current user only.

    Attributes:
      root: the server's throwaway directory (config, keys, log, ``remotes/``).
      home: the client's home directory (``.ssh/id_ed25519``).
      keyfile: the client's private key; user: the login name; port: the server's port.
    """

    def __init__(self, root: Path):
        self.sshd = find_sshd()
        if self.sshd is None:
            raise SSHUnavailable("sshd not found: install openssh-server "
                                 "(apt-get install openssh-server; .ci/run does)")
        self.root = Path(root)
        self.home = self.root / "home"
        (self.home / ".ssh").mkdir(parents=True)
        self.remotes = self.root / "remotes"
        self.remotes.mkdir()
        self.user = getpass.getuser()
        self.keyfile = self.home / ".ssh" / "id_ed25519"
        self.host_key = self.root / "host_ed25519"
        write_key(self.host_key)
        client_pub = write_key(self.keyfile)
        (self.root / "authorized_keys").write_text(client_pub + "\n")
        self.log = self.root / "sshd.log"
        self.port = free_port()
        self.proc: subprocess.Popen | None = None

    def _config(self) -> Path:
        cfg = self.root / "sshd_config"
        cfg.write_text("\n".join([
            f"Port {self.port}",
            "ListenAddress 127.0.0.1",
            f"HostKey {self.host_key}",
            f"PidFile {self.root / 'sshd.pid'}",
            f"AuthorizedKeysFile {self.root / 'authorized_keys'}",
            f"AllowUsers {self.user}",
            "PubkeyAuthentication yes",
            "PasswordAuthentication no",
            "KbdInteractiveAuthentication no",
            "PermitRootLogin prohibit-password",
            "UsePAM no",
            # the throwaway files sit in a temporary directory, whose parents may be
            # world-writable: no ownership walk up from them
            "StrictModes no",
            "Subsystem sftp internal-sftp",
            "MaxSessions 64",
            "MaxStartups 64",
            "LogLevel VERBOSE",
            "",
        ]))
        return cfg

    def start(self, timeout: float = 15.0) -> None:
        """Start ``sshd`` and wait for its banner. The first start takes another free port
        if the one chosen was taken meanwhile; a start after :meth:`stop` or :meth:`kill`
        keeps the port."""
        if os.geteuid() == 0 and not os.path.isdir("/run/sshd"):
            try:
                os.makedirs("/run/sshd", mode=0o755, exist_ok=True)
            except OSError as e:
                raise SSHUnavailable(f"sshd runs as root and /run/sshd cannot be made: {e}")
        first = self.proc is None
        for _ in range(3 if first else 1):
            try:
                return self._start(timeout)
            except _PortTaken:
                self.port = free_port()
        raise SSHUnavailable(f"sshd found no free port: {self.log_tail()}")

    def _start(self, timeout: float) -> None:
        cmd = [self.sshd, "-D", "-f", str(self._config()), "-E", str(self.log)]
        self.proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                     stderr=subprocess.PIPE, start_new_session=True)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                err = self.proc.stderr.read().decode(errors="replace").strip()
                self.proc.stderr.close()
                said = err or self.log_tail()
                if "Address already in use" in said:
                    raise _PortTaken(said)
                raise SSHUnavailable(f"sshd exited {self.proc.returncode} at start: {said}")
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=1) as s:
                    if s.recv(64).startswith(b"SSH-2.0-"):
                        return
            except OSError:
                pass
            time.sleep(0.05)
        self.stop()
        raise SSHUnavailable(f"sshd did not answer on 127.0.0.1:{self.port} within "
                             f"{timeout:.0f} s: {self.log_tail()}")

    def _processes(self):
        """The listener and every session process under it."""
        import psutil

        if self.proc is None or self.proc.poll() is not None:
            return []
        try:
            p = psutil.Process(self.proc.pid)
            return [p, *p.children(recursive=True)]
        except psutil.NoSuchProcess:
            return []

    def kill(self) -> None:
        """Stop the server as a crash does: SIGKILL to the listener and every session."""
        import psutil

        for p in self._processes()[::-1]:        # the sessions, then the listener
            try:
                p.kill()
            except psutil.NoSuchProcess:
                pass
        self._reap()

    def _reap(self) -> None:
        if self.proc is not None:
            self.proc.wait(timeout=10)
            if self.proc.stderr:
                self.proc.stderr.close()

    def stop(self) -> None:
        """Stop the listener and its sessions (SIGTERM, then SIGKILL after 5 s)."""
        import psutil

        procs = self._processes()
        for p in procs:
            try:
                p.terminate()
            except psutil.NoSuchProcess:
                pass
        _, alive = psutil.wait_procs(procs, timeout=5)
        for p in alive:
            try:
                p.kill()
            except psutil.NoSuchProcess:
                pass
        self._reap()

    def log_tail(self, n: int = 15) -> str:
        try:
            return " | ".join(self.log.read_text(errors="replace").splitlines()[-n:])
        except OSError:
            return "(no log)"

    def url(self, remote: str, port: int | None = None) -> str:
        """``ssh://127.0.0.1:<port>/<root>/remotes/<remote>`` (the directory is made)."""
        d = self.remotes / remote
        d.mkdir(exist_ok=True)
        return f"ssh://127.0.0.1:{port or self.port}{d}"


class Relay:
    """A TCP relay ``127.0.0.1:<port>`` -> the server, forwarding both ways.

    :meth:`hold_after` makes it forward only so many more bytes in one direction
    (``"up"``: client to server, a push; ``"down"``: server to client, a pull) and then
    hold the rest: the transfer stops part-way and stays there. :attr:`holding` is set
    once that happens. :meth:`cut` closes every connection it carries; new connections
    are then forwarded in full again.
    """

    def __init__(self, upstream_port: int):
        self.upstream_port = upstream_port
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port = self._listener.getsockname()[1]
        self._lock = threading.Lock()
        self._socks: list[socket.socket] = []
        self._direction: str | None = None
        self._left = 0
        self.holding = threading.Event()
        self._released = threading.Event()
        threading.Thread(target=self._accept, daemon=True).start()

    def hold_after(self, direction: str, nbytes: int) -> None:
        assert direction in ("up", "down")
        with self._lock:
            self._direction, self._left = direction, nbytes
            self.holding.clear()
            self._released.clear()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            try:
                server = socket.create_connection(("127.0.0.1", self.upstream_port), timeout=5)
                server.settimeout(None)
            except OSError:
                client.close()
                continue
            for sock in (client, server):       # no Nagle delay on SSH's small packets
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            with self._lock:
                self._socks += [client, server]
            for src, dst, d in ((client, server, "up"), (server, client, "down")):
                threading.Thread(target=self._pump, args=(src, dst, d), daemon=True).start()

    def _pump(self, src: socket.socket, dst: socket.socket, direction: str) -> None:
        try:
            while data := src.recv(65536):
                with self._lock:
                    held = self._direction == direction
                    room = self._left if held else len(data)
                    if held:
                        self._left = max(0, self._left - len(data))
                if room < len(data):
                    if room:
                        dst.sendall(data[:room])
                    self.holding.set()
                    self._released.wait()
                    return
                dst.sendall(data)
        except OSError:
            pass
        finally:
            for s in (src, dst):
                try:
                    s.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass

    def cut(self) -> None:
        with self._lock:
            socks, self._socks = self._socks, []
            self._direction = None
        self._released.set()
        for s in socks:
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            s.close()

    def close(self) -> None:
        self.cut()
        self._listener.close()
