"""Peer proxies memproxy is compared with."""
