"""Files written whole, as duet's own writers write them (src/base/safe_file.c):
a temporary with a random name in the output's folder (".<name>.duet-<16
hex>"), created with O_CREAT|O_EXCL|O_NOFOLLOW so that nothing planted there
is written through, flushed, fsynced and renamed over the output (the rename
replaces a link at the output's name, never its target), then the folder
synced. On any failure the temporary is removed and the file at the output's
name, if any, is untouched. An output that is one of the command's inputs
(the same file, through links or hard links) is refused before anything is
read or written, naming both.

    with safe_write.open_for(out, "wb", inputs=[src]) as f:
        f.write(data)

Errors are OutputError (an OSError's text put into a sentence naming the
output), for the scripts to print as a message."""
import contextlib
import os
import secrets


class OutputError(Exception):
    pass


def check_inputs(out, inputs):
    """OutputError when the file at out is one of inputs (same device and
    inode); names that do not exist are skipped."""
    try:
        so = os.stat(out)
    except OSError:
        return
    for i in inputs:
        if i is None:
            continue
        try:
            si = os.stat(i)
        except OSError:
            continue
        if (si.st_dev, si.st_ino) == (so.st_dev, so.st_ino):
            raise OutputError("the output %s is the input %s (the same file); writing it would "
                              "replace the input: name another output" % (out, i))


def temp_name(path):
    d, b = os.path.split(path)
    return os.path.join(d, ".%s.duet-%s" % (b[:200], secrets.token_hex(8)))


def _sync_folder(path):
    d = os.path.dirname(path) or "."
    try:
        fd = os.open(d, os.O_RDONLY | os.O_DIRECTORY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass  # some file systems cannot sync a folder; the file itself is synced
    finally:
        os.close(fd)


def _text(e):
    return e.strerror or str(e)


@contextlib.contextmanager
def open_for(path, mode="wb", inputs=(), encoding=None):
    """A file object to write `path` through (see the top of this file)."""
    if not path:
        raise OutputError("no output file named")
    check_inputs(path, inputs)
    if os.path.isdir(path):
        raise OutputError("%s: is a folder; name a file to write" % path)
    fd, tmp = -1, None
    for _ in range(16):
        tmp = temp_name(path)
        try:
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC,
                         0o666)
            break
        except FileExistsError:
            continue
        except OSError as e:
            raise OutputError("cannot write %s: cannot create a file in its folder: %s"
                              % (path, _text(e))) from None
    if fd < 0:
        raise OutputError("cannot write %s: no free temporary name in its folder" % path)
    try:
        f = os.fdopen(fd, mode, encoding=encoding) if "b" not in mode else os.fdopen(fd, mode)
    except BaseException:
        os.close(fd)
        os.unlink(tmp)
        raise
    try:
        with f:
            yield f
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException as e:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        if isinstance(e, OSError):
            raise OutputError("cannot write %s: %s" % (path, _text(e))) from None
        raise
    _sync_folder(path)


def write_bytes(path, data, inputs=()):
    with open_for(path, "wb", inputs) as f:
        f.write(data)


def write_text(path, text, inputs=()):
    with open_for(path, "w", inputs, encoding="utf-8") as f:
        f.write(text)
