"""ddpb_store: a client of ddpbench's rendezvous store (common/store_proto.h) for the
framework engines' bootstrap (engines/ddpb_launch.py).

The frameworks bring their own rendezvous (torch's TCPStore, TF's gRPC cluster, Horovod's
HTTP KV server); what they need from outside is where to find each other. A rank agrees
those ports and addresses with its peers through the same store, namespace and secret the
C worker uses, so the daemon's supervision (a run removed from the store wakes every
waiter) is the same for every engine.

Decision: only the ops the bootstrap uses (HELLO, SET, GET, WAIT, ADD), blocking, one
connection; a reply other than OK raises StoreError with the server's message. The wire
format is the header's: u32 length | body, little-endian, strings as u32 length | bytes."""
import socket
import struct

MAGIC = 0x42504444  # "DDPB"
VERSION = 1
OP_HELLO, OP_SET, OP_GET, OP_ADD, OP_WAIT = 1, 2, 3, 4, 7
OK, E_TIMEOUT = 0, 1
STATUS_NAMES = {0: "ok", 1: "timeout", 2: "not found", 3: "protocol", 4: "auth",
                5: "version", 6: "too large", 7: "closed", 8: "internal", 9: "conflict"}
MAX_FRAME = 16 << 20


class StoreError(Exception):
    """A reply other than OK: status (int) and the server's message."""

    def __init__(self, status, message):
        super().__init__(f"store: {STATUS_NAMES.get(status, status)}: {message}")
        self.status = status


def _str(b):
    if isinstance(b, str):
        b = b.encode()
    return struct.pack("<I", len(b)) + b


class Store:
    """One connection to the store, already past HELLO. Not thread-safe."""

    def __init__(self, addr, run, secret, rank, connect_timeout_s=30.0):
        host, _, port = addr.rpartition(":")
        self.sock = socket.create_connection((host.strip("[]"), int(port)),
                                             timeout=connect_timeout_s)
        self.sock.settimeout(None)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self._call(struct.pack("<BIH", OP_HELLO, MAGIC, VERSION) + _str(run) + _str(secret) +
                   struct.pack("<q", int(rank)))

    def close(self):
        self.sock.close()

    def _recv_exact(self, n):
        out = bytearray()
        while len(out) < n:
            chunk = self.sock.recv(n - len(out))
            if not chunk:
                raise ConnectionError("store closed the connection")
            out += chunk
        return bytes(out)

    def _call(self, body):
        self.sock.sendall(struct.pack("<I", len(body)) + body)
        (n,) = struct.unpack("<I", self._recv_exact(4))
        if n < 1 or n > MAX_FRAME:
            raise ConnectionError(f"store: bad reply length {n}")
        reply = self._recv_exact(n)
        status = reply[0]
        if status != OK:
            msg = reply[5:].decode(errors="replace") if n >= 5 else ""
            raise StoreError(status, msg)
        return reply[1:]

    @staticmethod
    def _bytes_of(payload):
        (n,) = struct.unpack_from("<I", payload)
        return payload[4:4 + n]

    def set(self, key, value):
        self._call(struct.pack("<B", OP_SET) + _str(key) + _str(value))

    def get(self, key, timeout_ms):
        """The value (bytes) once the key exists; StoreError(E_TIMEOUT) past the timeout."""
        return self._bytes_of(self._call(struct.pack("<B", OP_GET) + _str(key) +
                                         struct.pack("<I", int(timeout_ms))))

    def add(self, key, delta):
        return struct.unpack("<q", self._call(struct.pack("<B", OP_ADD) + _str(key) +
                                              struct.pack("<q", int(delta))))[0]

    def wait(self, keys, timeout_ms):
        body = struct.pack("<BI", OP_WAIT, len(keys)) + b"".join(_str(k) for k in keys)
        self._call(body + struct.pack("<I", int(timeout_ms)))
