"""Keep secrets out of params, tags, logs and artifacts: passwords in URIs and token-like query values."""

from __future__ import annotations

import re
from pathlib import Path

# `scheme://user:secret@host`, and `user:secret@host` where a URL was given without its scheme.
_USERINFO = re.compile(r"(?P<scheme>[a-zA-Z][\w+.-]*://|(?<![\w.:/@-]))(?P<user>[^:/@\s=]*):(?P<secret>[^@/\s]+)@")
_QUERY = re.compile(r"(?P<key>(?:token|password|passwd|pwd|secret|api[_-]?key|access[_-]?key|auth)=)"
                    r"(?P<secret>[^&\s'\"]+)", re.IGNORECASE)
MASK = "***"


def redact(text: str) -> str:
    """`scheme://user:password@host` -> `scheme://user:***@host`; `?token=abc` -> `?token=***`."""
    text = _USERINFO.sub(lambda m: f"{m['scheme']}{m['user']}:{MASK}@", text)
    return _QUERY.sub(lambda m: f"{m['key']}{MASK}", text)


def redact_files(folder: Path, pattern: str = "*.yaml") -> None:
    """Rewrite files (e.g. Hydra's .hydra/overrides.yaml) with their secrets masked."""
    for path in folder.glob(pattern):
        text = path.read_text()
        masked = redact(text)
        if masked != text:
            path.write_text(masked)
