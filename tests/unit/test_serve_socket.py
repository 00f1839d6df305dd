"""The socket `kb serve` listens on says it is TCP, so that asyncio turns Nagle's
algorithm off on every connection it accepts: with protocol 0 it did not, and each
answer waited 40 ms for the client's delayed ACK (benchmarks/serve.py)."""

import socket

from kb_cli.web import server


def test_the_listening_socket_is_tcp_and_its_connections_send_at_once():
    with server.listen("127.0.0.1", 0) as listening:
        assert listening.proto == socket.IPPROTO_TCP
        with socket.create_connection(listening.getsockname()[:2]):
            accepted, _ = listening.accept()
            with accepted:
                assert accepted.proto == socket.IPPROTO_TCP
