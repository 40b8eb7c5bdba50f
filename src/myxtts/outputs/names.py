"""File names made from identifiers a user's data chose (a corpus' utterance ids, a transcript's sentence ids, a
recording's name): one safe name per identifier, and the check that the path written stays in its folder.

A corpus id is whatever its list file says: ``../escape.wav``, ``/tmp/abs.wav`` and ``a/../../b.wav`` are ids a
list corpus keeps (they name the audio read), but a file written *for* them must land inside the output folder.
``safe_file_name`` keeps an id that is already a plain file name as it is, and turns any other into a readable name
of letters, digits, ``_``, ``-`` and ``.`` with ``-`` and the first 8 hex digits of the id's SHA-256 appended, so two
ids never share a name (``a/b`` and ``a_b`` differ; a plain id that already ends that way is changed too).
``path_in_folder`` joins such a name to its folder and refuses a path that
resolves outside it (a link planted in the folder).
"""

from __future__ import annotations

import hashlib
import re
from pathlib import Path

from myxtts.outputs.markers import OutputRefused

# a name kept as it is: word characters (any script), '-' and '.', not starting with '.' (hidden, '.', '..') nor
# ending with one (Windows drops it), at most MAX_NAME_BYTES of UTF-8 (suffixes such as
# '_teacher_forced_mel.png' must still fit the 255 bytes of common file systems)
_PLAIN_NAME = re.compile(r"[^\W][\w.\-]*(?<!\.)")
_UNSAFE_RUN = re.compile(r"[^\w.\-]+")  # separators, NUL and control characters, spaces, <>:"|?* ...
_WINDOWS_RESERVED = re.compile(r"(con|prn|aux|nul|com[0-9]|lpt[0-9])(\..*)?", re.IGNORECASE)
MAX_NAME_BYTES = 120
_DIGEST_CHARACTERS = 8
# what a changed name ends with: a plain id that does too is changed as well, so no id keeps a name made for another
_DIGEST_ENDING = re.compile(rf".*-[0-9a-f]{{{_DIGEST_CHARACTERS}}}")


def safe_file_name(identifier: str) -> str:
    """A file name (no folder) for ``identifier``: the identifier itself when it is a plain name (see the module
    docstring), else its readable part plus ``-`` and 8 hex digits of its SHA-256 (``../escape.wav`` ->
    ``escape.wav-`` + digest). Never empty, never hidden, ``.`` or ``..``, never a path, never a name Windows
    reserves; at most ``MAX_NAME_BYTES`` + 10 bytes of UTF-8. (Two plain ids differing only in case, ``A`` and
    ``a``, stay two names: one file on a case-insensitive file system.)"""
    if (_PLAIN_NAME.fullmatch(identifier) and not _WINDOWS_RESERVED.fullmatch(identifier)
            and not _DIGEST_ENDING.fullmatch(identifier) and len(identifier.encode("utf-8")) <= MAX_NAME_BYTES):
        return identifier
    readable = _UNSAFE_RUN.sub("_", identifier)
    readable = re.sub(r"\.{2,}", "_", readable)  # no '..' left to read as a parent folder: 'a_.._b' -> 'a___b'
    readable = re.sub(r"_{2,}", "_", readable).strip("._-")
    readable = readable.encode("utf-8")[:MAX_NAME_BYTES].decode("utf-8", "ignore").rstrip(".") or "id"
    if _WINDOWS_RESERVED.fullmatch(readable):  # 'nul.wav' names the device NUL on Windows, whatever follows
        readable = f"_{readable}"
    digest = hashlib.sha256(identifier.encode("utf-8", "surrogatepass")).hexdigest()[:_DIGEST_CHARACTERS]
    return f"{readable}-{digest}"


def path_in_folder(folder: str | Path, name: str) -> Path:
    """``folder / name``, refused (``OutputRefused``) unless it resolves inside ``folder``: the last check before a
    writer writes a file named from data (a ``name`` that is a path, or a link in the folder pointing elsewhere,
    would write outside it)."""
    folder = Path(folder)
    path = folder / name
    inside = folder.resolve()
    resolved = path.resolve()
    if resolved == inside or not resolved.is_relative_to(inside):
        raise OutputRefused(f"{path} resolves to {resolved}, outside the output folder {folder}: nothing is written "
                            "there. Remove that link (or name), or choose another folder.")
    return path
