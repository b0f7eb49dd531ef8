"""The first code ``memtape attach`` runs inside the target process: this file is
compiled and executed there in a namespace of its own (nothing is added to the target's
``__main__``), and its :func:`run` called with the path of the session's
``request.json`` (see :func:`payload_code`). It imports memtape from the package
directory the request names (the build for the target's Python; ``sys.path`` is left
as it was), starts the capture and writes the outcome into ``result.json``. No
exception leaves it: the target must not see one, nor a traceback on its stderr. It
imports nothing at module level: memtape is not importable in the target before it
runs."""


def payload_code(package_dir: str, request_path: str) -> str:
    """One line of Python that runs :func:`run` of the memtape package in
    ``package_dir`` in the target, defining no name there (``PyRun_SimpleString`` and
    PEP 768 both run code in ``__main__``'s namespace).

    A payload may reach the target twice (queued, and run in a blocked thread; see
    ``injection``): the line does nothing but look at two files when the session is
    gone or answered already, since the target may be recording by then. The namespace
    is emptied after the run, so that its functions (a reference cycle through their
    globals) are freed at once."""
    import os

    here = os.path.join(package_dir, "attach", "bootstrap.py")
    result = os.path.join(os.path.dirname(request_path), "result.json")
    return (
        f"__import__('os').path.exists({result!r}) or "
        f"not __import__('os').path.exists({request_path!r}) or "
        f"(lambda g: (exec(compile(open({here!r}).read(), {here!r}, 'exec'), g), "
        f"g['run']({request_path!r}), g.clear()))({{'__name__': '__memtape_attach__'}})"
    )


def run(request_path: str) -> None:
    """Starts the capture the request asks for; writes ``result.json`` (see
    ``session_files``). Never raises."""
    try:
        _run(request_path)
    except BaseException:  # noqa: BLE001, S110 - the target must not see memtape's errors
        pass


def _run(request_path: str) -> None:
    import json
    import os
    import sys

    directory = os.path.dirname(request_path)
    try:
        # First come, first served (session_files.SessionFiles.decide): memtape attach
        # may have given up waiting (the session is over), or this payload already ran
        # by another way in (injection: a blocked main thread); then nothing happens.
        fd = os.open(os.path.join(directory, "decision"), os.O_WRONLY | os.O_CREAT | os.O_EXCL)
    except FileExistsError:
        with open(os.path.join(directory, "decision"), encoding="utf-8") as f:
            cancelled = f.read() == "cancelled"
        if cancelled:
            for name in os.listdir(directory):
                os.remove(os.path.join(directory, name))
            os.rmdir(directory)
        return
    os.write(fd, b"started")
    os.close(fd)
    try:
        with open(request_path, encoding="utf-8") as f:
            request = json.load(f)
        parent = request["package_parent"]
        loaded = sys.modules.get("memtape")
        if loaded is not None:
            where = os.path.dirname(os.path.dirname(os.path.abspath(loaded.__file__ or "")))
            if where != parent:
                raise RuntimeError(f"the target already imported another memtape, from {where}")
        added = parent not in sys.path
        if added:
            sys.path.insert(0, parent)
        try:
            from memtape.attach.in_target import attach
        finally:
            if added and parent in sys.path:
                sys.path.remove(parent)
        attach(request)  # writes result.json
        return
    except BaseException as exc:  # noqa: BLE001 - reported to memtape attach instead
        result = {"error": f"{type(exc).__name__}: {exc}"}
    result_path = os.path.join(directory, "result.json")
    partial = result_path + ".partial"
    with open(partial, "w", encoding="utf-8") as f:
        json.dump(result, f)
    os.replace(partial, result_path)
