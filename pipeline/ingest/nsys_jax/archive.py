"""Members of an ``nsys-jax`` zip archive (or of the folder it was extracted to), read into
memory with bounds: nothing is ever extracted to disk, so a member's name (``../../etc/x``,
an absolute path) cannot place a file anywhere; a member is read only up to the size its
entry declares and at most :data:`MAX_MEMBER_BYTES`, and one that inflates more than
:data:`MAX_RATIO` times its compressed size is refused, so a zip bomb costs neither memory
nor time. xz members (the HLO dumps) are inflated with the same bounds.
"""

from __future__ import annotations

import lzma
import os
import stat
import zipfile
from pathlib import Path

from ...errors import TraceFormatError

#: Most entries an archive may list (the real ones hold about 180).
MAX_ENTRIES = 100_000
#: Most bytes one member may inflate to (a 4-process job's projected NVTX trace is 0.5 MB;
#: its largest HLO dump 6.5 MB).
MAX_MEMBER_BYTES = 1 << 30
#: Inflated bytes per compressed byte beyond which a member is a bomb (deflate's and xz's
#: own maxima are about 1,000 and 7,000); small members are always allowed.
MAX_RATIO = 200
MIN_LIMIT_BYTES = 64 << 20


class Archive:
    """An open archive; use as a context manager."""

    def __init__(self, path: Path) -> None:
        self.path = path
        try:
            self._zip = zipfile.ZipFile(path)
        except (zipfile.BadZipFile, OSError, ValueError) as exc:
            raise TraceFormatError(path, f"not a readable zip archive: {exc}") from None
        entries = self._zip.infolist()
        if len(entries) > MAX_ENTRIES:
            self._zip.close()
            raise TraceFormatError(path, f"more than {MAX_ENTRIES} entries in the archive")
        self.members = {e.filename: e for e in entries if not e.is_dir()}

    def __enter__(self) -> Archive:
        return self

    def __exit__(self, *exc: object) -> None:
        self._zip.close()

    def read(self, name: str) -> bytes:
        """Member ``name``'s bytes (decompressed when it ends in ``.xz``)."""
        entry = self.members.get(name)
        if entry is None:
            raise TraceFormatError(self.path, f"no {name} in the archive")
        limit = min(MAX_MEMBER_BYTES, max(MIN_LIMIT_BYTES, MAX_RATIO * entry.compress_size))
        if entry.file_size > limit:
            raise TraceFormatError(
                self.path, f"{name}: {entry.file_size} bytes once inflated, more than {limit}"
            )
        try:
            with self._zip.open(entry) as fh:
                data = fh.read(entry.file_size + 1)
        except (zipfile.BadZipFile, OSError, RuntimeError, ValueError, EOFError) as exc:
            raise TraceFormatError(self.path, f"{name}: cannot read: {exc}") from None
        if len(data) != entry.file_size:
            raise TraceFormatError(self.path, f"{name}: not the size its entry declares")
        return _unxz(self.path, name, data) if name.endswith(".xz") else data


def _unxz(path: Path, name: str, data: bytes) -> bytes:
    limit = min(MAX_MEMBER_BYTES, max(MIN_LIMIT_BYTES, MAX_RATIO * len(data)))
    decompressor = lzma.LZMADecompressor(format=lzma.FORMAT_XZ)
    try:
        out = decompressor.decompress(data, max_length=limit)
    except lzma.LZMAError as exc:
        raise TraceFormatError(path, f"{name}: broken xz data: {exc}") from None
    if not decompressor.eof:
        what = f"more than {limit} bytes once inflated" if len(out) >= limit else "cut off"
        raise TraceFormatError(path, f"{name}: {what}")
    return out


class Folder:
    """An extracted archive: the folder holding ``nvtx_gpu_proj_trace/``. Its regular files
    are its members (links are not followed), read with the bounds of :class:`Archive`."""

    def __init__(self, root: Path, path: Path) -> None:
        self.path = path  # (the file named: errors name it)
        self.root = root
        self.members: dict[str, Path] = {}
        for folder, _dirs, names in os.walk(root):
            for name in names:
                member = Path(folder, name)
                if stat.S_ISREG(member.lstat().st_mode):
                    self.members[member.relative_to(root).as_posix()] = member
            if len(self.members) > MAX_ENTRIES:
                raise TraceFormatError(path, f"more than {MAX_ENTRIES} files beside the trace")

    def __enter__(self) -> Folder:
        return self

    def __exit__(self, *exc: object) -> None:
        return None

    def read(self, name: str) -> bytes:
        """Member ``name``'s bytes (decompressed when it ends in ``.xz``)."""
        member = self.members.get(name)
        if member is None:
            raise TraceFormatError(self.path, f"no {name} in {self.root}")
        try:
            with open(member, "rb") as fh:
                data = fh.read(MAX_MEMBER_BYTES + 1)
        except OSError as exc:
            raise TraceFormatError(member, f"cannot read file: {exc.strerror or exc}") from None
        if len(data) > MAX_MEMBER_BYTES:
            raise TraceFormatError(member, f"larger than {MAX_MEMBER_BYTES} bytes")
        return _unxz(member, name, data) if name.endswith(".xz") else data
