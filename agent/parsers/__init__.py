"""Pure parsers: kernel text in, typed values out. No file I/O here, so each one is tested on the real
kernel snapshots in ../shared/fixtures and fuzzed. A malformed line is skipped and counted, never raised.
"""
