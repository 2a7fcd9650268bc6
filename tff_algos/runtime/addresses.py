"""Worker addresses for `--workers` (no TensorFlow: checked before loading).

A malformed address is a usage error (exit 2) before TensorFlow is imported
and data are loaded (docs/guide/remote-workers.md). Argument checking: no time,
memory or security figure concerns it.
"""


def parse_workers(text):
  """'host:port,host:port' → ['host:port', ...]; ValueError if malformed.

  IPv6 hosts go in brackets: '[::1]:8000'. Empty text → [] (local runtime).
  """
  if not text or not text.strip():
    return []
  addresses = []
  for item in text.split(','):
    item = item.strip()
    host, sep, port = item.rpartition(':')
    if host.startswith('[') and host.endswith(']'):
      bare_host = host[1:-1]
    else:
      bare_host = host
    if (
      not sep
      or not bare_host
      or not port.isdigit()
      or not 0 < int(port) < 65536
      or any(c in bare_host for c in '[]/ ')
      or (':' in bare_host and host == bare_host)
    ):
      raise ValueError(
        f'--workers: {item!r} is not host:port (e.g. '
        f'127.0.0.1:8000 or [::1]:8000)'
      )
    address = f'{host}:{int(port)}'
    if address in addresses:
      raise ValueError(f'--workers: {address} is listed twice')
    addresses.append(address)
  return addresses
