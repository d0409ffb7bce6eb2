"""Where checkpoints live: a local folder, or a URI on a distributed file system (hdfs://), and
the few file operations CardStream's Python side does there without a JVM.

Spark reads and writes checkpoints itself, through Hadoop's FileSystem, by the URI it is given.
The auditor, the dashboard and the jobs' own bookkeeping (a checkpoint's query id, its newest
committed batch, the at-most-once queries' instance folders) read the same files from Python: a
local folder with the standard library, an hdfs:// one over WebHDFS, the NameNode's REST API
(urllib only; a JVM per read would cost seconds).

A local folder is a `pathlib.Path`; anything else is a `Location`, a URI that joins with `/` as a
Path does (`Path("hdfs://h:1/a")` would collapse the `//`) and carries the WebHDFS address and
user its files are read with, so those are read once from the settings and handed down with it.
"""
from __future__ import annotations

import json
import os
import shutil
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass
from pathlib import Path

TIMEOUT_S = 10.0


class StorageError(RuntimeError):
    """A checkpoint store that cannot be read or written, said in one sentence."""


def join(base: str, *parts: str) -> str:
    """`base` and `parts` joined with single slashes, the URI's scheme and authority kept whole
    (`join("hdfs://h:1/", "a", "b/")` is "hdfs://h:1/a/b")."""
    out = base.rstrip("/")
    for part in parts:
        part = str(part).strip("/")
        if part:
            out = f"{out}/{part}"
    return out


@dataclass(frozen=True)
class Location:
    """A file or folder on a distributed file system, by URI, with how Python reaches it: `web`, the
    WebHDFS address (http://namenode:port), None when there is none (Spark still can)."""
    uri: str
    web: str | None = None
    user: str = "cardstream"

    def __post_init__(self):
        if "://" not in self.uri:
            raise StorageError(f"{self.uri!r} is not a URI like hdfs://host:port/path.")
        object.__setattr__(self, "uri", join(self.uri) if self.path != "/" else self.uri)

    def __truediv__(self, part) -> "Location":
        return Location(join(self.uri, str(part)), self.web, self.user)

    def __str__(self) -> str:
        return self.uri

    @property
    def path(self) -> str:
        """The path inside the file system ("/a/b"), as WebHDFS names it."""
        return urllib.parse.urlsplit(self.uri).path or "/"

    @property
    def name(self) -> str:
        return self.path.rstrip("/").rsplit("/", 1)[-1]

    @property
    def parent(self) -> "Location":
        scheme = urllib.parse.urlsplit(self.uri)
        head = f"{scheme.scheme}://{scheme.netloc}"
        return Location(join(head, self.path.rstrip("/").rsplit("/", 1)[0]) or head, self.web, self.user)

    def with_name(self, name: str) -> "Location":
        return self.parent / name


Place = Path | Location


def location(text: str | Path, web: str | None = None, user: str = "cardstream") -> Place:
    """A checkpoint place from a setting or an argument: a URI with a scheme other than file:// is
    a Location (read over `web`), anything else a resolved local Path."""
    text = str(text)
    if text.startswith("file://"):
        return Path(urllib.parse.urlsplit(text).path).resolve()
    if "://" in text:
        return Location(text, web, user)
    return Path(text).resolve()


def is_remote(place) -> bool:
    return isinstance(place, Location)


@dataclass(frozen=True)
class Entry:
    """One child of a folder: its name, whether it is a folder, its size and modification time."""
    name: str
    is_dir: bool
    size: int
    mtime_ms: int


# -- WebHDFS ---------------------------------------------------------------------------------------
def _url(loc: Location, op: str, **params) -> str:
    if not loc.web:
        raise StorageError(f"{loc.uri} cannot be read from Python: no WebHDFS address is set for it "
                           f"(WEBHDFS=http://namenode:port).")
    query = urllib.parse.urlencode({"op": op, "user.name": loc.user, **params})
    return f"{loc.web.rstrip('/')}/webhdfs/v1{urllib.parse.quote(loc.path)}?{query}"


def _call(loc: Location, method: str, op: str, data: bytes | None = None, **params) -> bytes | None:
    """One WebHDFS request; its body, or None when the path does not exist."""
    url = _url(loc, op, **params)
    return _send(urllib.request.Request(url, data=data, method=method), loc)


def _send(req: urllib.request.Request, loc: Location) -> bytes | None:
    try:
        with urllib.request.urlopen(req, timeout=TIMEOUT_S) as resp:
            return resp.read()
    except urllib.error.HTTPError as exc:
        if exc.code == 404:
            return None
        try:
            detail = json.loads(exc.read())["RemoteException"]["message"]
        except (ValueError, KeyError, TypeError, OSError):
            detail = exc.reason
        raise StorageError(f"HDFS refused {req.get_method()} {loc.uri}: {detail}") from None
    except (urllib.error.URLError, OSError) as exc:
        reason = getattr(exc, "reason", exc)
        raise StorageError(f"HDFS does not answer on {loc.web} ({reason}) for {loc.uri}; start it "
                           f"(make cluster-up) or point WEBHDFS at its NameNode.") from None


def _status(doc: dict, name: str | None = None) -> Entry:
    return Entry(name if name is not None else doc.get("pathSuffix", ""), doc.get("type") == "DIRECTORY",
                 int(doc.get("length", 0)), int(doc.get("modificationTime", 0)))


# -- operations, local or remote ---------------------------------------------------------------------
def read_text(place: Place) -> str | None:
    """A file's text, None when it is absent or not text (a file half-written reads as it stands)."""
    if is_remote(place):
        body = _call(place, "GET", "OPEN")
    else:
        try:
            body = Path(place).read_bytes()
        except OSError:
            return None
    try:
        return None if body is None else body.decode()
    except UnicodeDecodeError:
        return None


def entries(place: Place) -> list[Entry]:
    """A folder's children, [] when it is absent."""
    if is_remote(place):
        body = _call(place, "GET", "LISTSTATUS")
        if body is None:
            return []
        docs = json.loads(body).get("FileStatuses", {}).get("FileStatus", [])
        return [_status(d) for d in docs if d.get("pathSuffix")]
    out = []
    try:
        children = list(Path(place).iterdir())
    except OSError:
        return []
    for p in children:
        try:
            st = p.stat()
        except OSError:  # removed meanwhile, or a dangling link
            continue
        out.append(Entry(p.name, p.is_dir(), st.st_size, int(st.st_mtime * 1000)))
    return out


def stat(place: Place) -> Entry | None:
    """A file's or folder's entry, None when absent."""
    if is_remote(place):
        body = _call(place, "GET", "GETFILESTATUS")
        return None if body is None else _status(json.loads(body)["FileStatus"], place.name)
    try:
        st = Path(place).stat()
    except OSError:
        return None
    return Entry(Path(place).name, Path(place).is_dir(), st.st_size, int(st.st_mtime * 1000))


def total_bytes(place: Place) -> int:
    """The bytes of every file under a folder (0 when absent)."""
    if is_remote(place):
        body = _call(place, "GET", "GETCONTENTSUMMARY")
        return 0 if body is None else int(json.loads(body)["ContentSummary"]["length"])
    total = 0
    for dirpath, _, files in os.walk(place):
        for f in files:
            try:
                total += os.stat(os.path.join(dirpath, f), follow_symlinks=False).st_size
            except OSError:
                pass
    return total


def make_dirs(place: Place) -> None:
    if is_remote(place):
        _call(place, "PUT", "MKDIRS")
    else:
        Path(place).mkdir(parents=True, exist_ok=True)


def remove(place: Place) -> None:
    """Remove a file or a folder with everything in it; nothing when absent."""
    if is_remote(place):
        _call(place, "DELETE", "DELETE", recursive="true")
    elif Path(place).is_symlink() or Path(place).is_file():
        Path(place).unlink(missing_ok=True)
    else:
        shutil.rmtree(place, ignore_errors=True)


def write_text(place: Place, text: str) -> None:
    """Write a small file whole: written aside, then renamed over the old one, so a reader finds
    the old text or the new, never a part (WebHDFS: rename with OVERWRITE, one NameNode operation)."""
    tmp = place.with_name(f".{place.name}.{os.getpid()}.tmp")
    if not is_remote(place):
        Path(tmp).write_text(text)
        os.replace(tmp, place)
        return
    # CREATE is two steps: the NameNode names a DataNode, the data goes there
    where = _call(tmp, "PUT", "CREATE", overwrite="true", noredirect="true")
    target = json.loads(where)["Location"]
    _send(urllib.request.Request(target, data=text.encode(), method="PUT",
                                 headers={"Content-Type": "application/octet-stream"}), tmp)
    _call(tmp, "PUT", "RENAME", destination=place.path, renameoptions="OVERWRITE")


def like(root: Place, text: str | Path) -> Place:
    """`text` (a folder or a URI, from an argument) read with `root`'s WebHDFS address and user,
    so an hdfs:// argument is readable as the settings' checkpoint root is."""
    if is_remote(root):
        return location(text, root.web, root.user)
    return location(text)
