"""A zip-based document (DOCX) checked before it is parsed: how many parts it holds, each part's
and all parts' unpacked size and how well each packs, against :mod:`draftscope.documents.limits`.

Only the zip's directory is read here (no part is unpacked), so a bomb costs nothing to refuse.
The sizes are what the directory declares; a directory that lies is caught while parsing, which
runs in a child process whose memory is bounded (:mod:`draftscope.documents.isolate`), and by
zipfile itself, which never unpacks a part past its declared size (a lie shows as a bad CRC)."""

from __future__ import annotations

import io
import zipfile

from draftscope.documents.limits import AttachmentError, ReadLimits, megabytes


def check_package(name: str, data: bytes, limits: ReadLimits) -> None:
    """Raise :class:`AttachmentError` naming ``name`` and the limit it goes past; return when the
    package's declared sizes are within every limit."""
    try:
        members = zipfile.ZipFile(io.BytesIO(data)).infolist()
    except (zipfile.BadZipFile, zipfile.LargeZipFile, ValueError, OSError, EOFError) as exc:
        raise AttachmentError(f"{name} is not a Word document that can be read: {exc}") from exc
    if len(members) > limits.package_members:
        raise AttachmentError(
            f"{name} holds {len(members):,} files inside: a Word document may hold up to "
            f"{limits.package_members:,} (this looks like a crafted archive)"
        )
    total = 0
    for member in members:
        size = member.file_size
        total += size
        if size > limits.member_bytes:
            raise AttachmentError(
                f"{name} would unpack its part {member.filename} to {megabytes(size)}: "
                f"one part may unpack to at most {megabytes(limits.member_bytes)}"
            )
        if size > limits.ratio_floor_bytes and size > limits.ratio * max(member.compress_size, 1):
            raise AttachmentError(
                f"{name} would unpack its part {member.filename} {size / max(member.compress_size, 1):,.0f} times "
                f"over (to {megabytes(size)}): a part may unpack to at most {limits.ratio} times its packed "
                "size (this looks like a zip bomb)"
            )
    if total > limits.unpacked_bytes:
        raise AttachmentError(
            f"{name} would unpack to {megabytes(total)}: a Word document may unpack to at most "
            f"{megabytes(limits.unpacked_bytes)}"
        )
