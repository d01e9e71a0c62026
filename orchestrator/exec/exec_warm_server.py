# Ferry's warm Python server (see orchestrator/exec/exec_warm.c, which builds
# this file into ferryd and starts it): imports the modules a step declared
# in `warm: {preload: [...]}` once, then forks a job per request from the
# daemon. Run as `python3 -c SOURCE FD MODULE...`, FD the daemon's end of a
# socket pair: one JSON object a line each way.
#
#   server -> daemon   {"ready": MS} after the imports (or {"error": TEXT}
#                      and exit), then one {"pid": PID, "start": TICKS} or
#                      {"error": TEXT} per request, in order.
#   daemon -> server   {"argv": [...], "env": [...], "cwd": DIR, "log": FILE,
#                      "status": FILE, "mask": [VALUE, ...]}
#
# Per request the server forks a supervisor (A), the warm twin of the C
# shim in exec_local.c: it starts a session (so the job is one process
# group the engine signals and samples), writes "pid PID START" to the
# attempt's status file, opens the log, forks the job (B) and records how B
# ended ("exit N" / "signal N"), masking the step's secrets on the way to
# the log when it has any. A outlives the server and the daemon, so a
# restarted daemon re-adopts the job as it does a cold one. B becomes the
# job: the step's argv, environment, working directory and standard
# streams, fresh random seeds, then the script as `python3 SCRIPT`,
# `-m MODULE` or `-c CODE` would run it; nothing is reused across jobs.
# The server itself never runs job code. EOF on FD (the daemon gone or
# done with it) ends the server; the jobs it forked go on.
import gc
import importlib
import io
import json
import os
import re
import select
import signal
import socket
import sys
import time
import types

LINGER_S = 1.0  # what a grandchild still writes after the job ended, at most (logmask.c)


def start_ticks(pid):
    with open("/proc/%d/stat" % pid, "rb") as f:
        stat = f.read()
    return int(stat[stat.rindex(b")") + 2:].split()[19])


def write_all(fd, data):
    while data:
        n = os.write(fd, data)
        data = data[n:]


class Mask:
    """The secrets' values in a log, masked as logmask.c does: longest value first, a tail held
    back while a value may still begin in it (nor is a shorter value masked where a longer one
    may still follow). The values are found by one regular expression, in C: a job's log goes
    through at the speed it is written."""

    MARK = b"***"

    def __init__(self, values):
        self.values = sorted({v.encode() for v in values if v}, key=lambda v: (-len(v), v))
        self.longest = len(self.values[0]) if self.values else 0
        self.pattern = re.compile(b"|".join(re.escape(v) for v in self.values)) if self.values else None
        self.buf = b""

    def feed(self, fd, data, final=False):
        buf = self.buf + data
        out, start, hold = [], 0, len(buf)

        def partial(lo, hi):
            """The first place in [lo, hi] where a value longer than the rest of buf may begin."""
            for i in range(max(lo, len(buf) - self.longest + 1), min(hi, len(buf) - 1) + 1):
                tail = buf[i:]
                if any(len(v) > len(tail) and v.startswith(tail) for v in self.values):
                    return i
            return None

        for m in self.pattern.finditer(buf):
            p = None if final else partial(start, m.start())
            if p is not None:
                hold = p
                break
            out.append(buf[start:m.start()])
            out.append(self.MARK)
            start = m.end()
        else:
            p = None if final else partial(start, len(buf) - 1)
            if p is not None:
                hold = p
        out.append(buf[start:hold])
        write_all(fd, b"".join(out))
        self.buf = buf[hold:]


def cannot_start(e, fd=2):
    """B could not become the job: said in its log, and it ends as the shim's child does then (126),
    never as a job that ran."""
    try:
        write_all(fd, ("ferry: cannot start the job warm: %s: %s\n" % (type(e).__name__, e)).encode())
    finally:
        os._exit(126)


def supervise(req, status_fd, log_fd):
    """A: starts the job, waits for it, records how it ended; returns the request in B."""
    mask = Mask(req.get("mask") or [])
    r = w = -1
    if mask.values:
        r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        try:
            os.close(status_fd)
            out = w if w >= 0 else log_fd
            null = os.open("/dev/null", os.O_RDONLY)
            os.dup2(null, 0)
            os.dup2(out, 1)
            os.dup2(out, 2)
        except BaseException as e:
            cannot_start(e, log_fd)
        return req
    st = 0
    if w >= 0:
        os.close(w)
        ended, until = False, 0.0
        while True:
            if not ended:
                p, s = os.waitpid(pid, os.WNOHANG)
                if p == pid:
                    ended, st, until = True, s, time.monotonic() + LINGER_S
            if ended and time.monotonic() >= until:
                break
            ready, _, _ = select.select([r], [], [], 0.1 if ended else 0.25)
            if not ready:
                if ended:
                    break
                continue
            data = os.read(r, 16384)
            if not data:
                break
            mask.feed(log_fd, data)
        mask.feed(log_fd, b"", final=True)
        os.close(r)
        if not ended:
            st = os.waitpid(pid, 0)[1]
    else:
        st = os.waitpid(pid, 0)[1]
    if os.WIFSIGNALED(st):
        line = "signal %d\n" % os.WTERMSIG(st)
    else:
        line = "exit %d\n" % os.WEXITSTATUS(st)
    write_all(status_fd, line.encode())
    os._exit(0)


def spawn(sock, req):
    """Starts A for a request: the server gets (A's pid, its start), B (the job) the request.

    A double fork: the middle process exits at once, so A is reparented to the nearest
    subreaper above, ferryd, which then hears of its end by SIGCHLD as it does of a cold
    shim's. The pid and start time come back through a pipe once the middle one has exited
    (A is ferryd's child by then)."""
    r, w = os.pipe()
    mid = os.fork()
    if mid:
        os.close(w)
        os.waitpid(mid, 0)
        with os.fdopen(r, "rb") as f:
            pid, start = f.read().split()
        return (int(pid), int(start)), None
    try:
        os.close(r)
        pid = os.fork()
        if pid:
            write_all(w, b"%d %d" % (pid, start_ticks(pid)))
            os._exit(0)
        os.close(w)
        # A, the supervisor: its own session, deaf to what the engine sends the group
        sock.close()
        for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
            signal.signal(sig, signal.SIG_IGN)
        os.setsid()
        status_fd = os.open(req["status"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_APPEND | os.O_CLOEXEC, 0o644)
        write_all(status_fd, ("pid %d %d\n" % (os.getpid(), start_ticks(os.getpid()))).encode())
        log_fd = os.open(req["log"], os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC, 0o644)
        job = supervise(req, status_fd, log_fd)
    except BaseException:
        os._exit(0)  # no status end line: the engine reports the supervisor gone
    return None, job


def serve(fd, modules):
    sock = socket.socket(fileno=fd)

    def send(obj):
        sock.sendall((json.dumps(obj) + "\n").encode())

    t0 = time.monotonic()
    try:
        for m in modules:
            importlib.import_module(m)
    except BaseException as e:
        send({"error": "import %s: %s: %s" % (m, type(e).__name__, e)})
        os._exit(1)
    # what the imports made is never collected here: a collection in a job would write to every
    # object's header and so copy every page the fork shares (gc.freeze, Python 3.7+)
    gc.collect()
    gc.freeze()
    send({"ready": int((time.monotonic() - t0) * 1000)})
    buf = b""
    while True:
        data = sock.recv(1 << 16)
        if not data:
            os._exit(0)
        buf += data
        while b"\n" in buf:
            line, buf = buf.split(b"\n", 1)
            try:
                a, job = spawn(sock, json.loads(line))
                if job is not None:
                    return job
                reply = {"pid": a[0], "start": a[1]}
            except Exception as e:
                reply = {"error": "%s: %s" % (type(e).__name__, e)}
            send(reply)


def std_stream(fd, write, unbuffered, like):
    """A standard stream as a fresh interpreter makes it (fd kept open, as CPython's own are)."""
    raw = io.FileIO(fd, "w" if write else "r", closefd=False)
    buffered = raw if write and unbuffered else (io.BufferedWriter(raw) if write else io.BufferedReader(raw))
    return io.TextIOWrapper(buffered, encoding=like.encoding, errors=like.errors,
                            line_buffering=fd == 2 or raw.isatty(), write_through=write and unbuffered)


def shown(tb, runpy_too):
    """The traceback as a cold interpreter prints it: without this server's frame, and without
    runpy's for a script (`python -m` shows runpy's frames, as they are its own there)."""
    while tb is not None and (tb.tb_frame.f_code is run_script.__code__ or
                              (runpy_too and "runpy" in tb.tb_frame.f_code.co_filename)):
        tb = tb.tb_next
    return tb


def report(runpy_too):
    """Prints the exception being handled as an uncaught one is printed."""
    t, v, tb = sys.exc_info()
    tb = shown(tb, runpy_too)
    sys.excepthook(t, v.with_traceback(tb), tb)


def run_job(req):
    """B: becomes the job and runs it; ends the process (SystemExit) like a cold start."""
    try:
        mode, what, args = become_job(req)
    except BaseException as e:
        cannot_start(e)
    run_script(mode, what, args)


def become_job(req):
    """B takes the job's signals, descriptors, directory, environment and streams."""
    argv = req["argv"]
    env = dict(e.split("=", 1) for e in req["env"] if "=" in e)
    for s in (signal.SIGTERM, signal.SIGHUP, signal.SIGCHLD, signal.SIGQUIT, signal.SIGUSR1,
              signal.SIGUSR2, signal.SIGALRM):
        signal.signal(s, signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGPIPE, signal.SIG_IGN)  # as CPython sets them at startup
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    os.closerange(3, 1 << 20)  # only the standard streams, as the C shim leaves a cold job
    os.chdir(req["cwd"])
    os.environ.clear()
    os.environ.update(env)
    args, unbuffered, mode, what = argv[1:], bool(env.get("PYTHONUNBUFFERED")), "script", None
    while args and args[0] in ("-u", "-m", "-c"):
        flag = args.pop(0)
        if flag == "-u":
            unbuffered = True
        else:
            mode, what = ("module" if flag == "-m" else "code"), args.pop(0)
            break
    if mode == "script":
        what = args.pop(0)
    sys.stdin = sys.__stdin__ = std_stream(0, False, unbuffered, sys.__stdin__ or sys.stdout)
    sys.stdout = sys.__stdout__ = std_stream(1, True, unbuffered, sys.__stdout__)
    sys.stderr = sys.__stderr__ = std_stream(2, True, unbuffered, sys.__stderr__)
    # a fork shares its parent's random state; a fresh interpreter seeds from the OS
    if "random" in sys.modules:
        sys.modules["random"].seed()
    if "numpy.random" in sys.modules:
        sys.modules["numpy.random"].seed()
    return mode, what, args


def run_script(mode, what, args):
    """The script as `python SCRIPT`, `python -m MODULE` or `python -c CODE` runs it."""
    import runpy
    try:
        if mode == "script":
            sys.argv = [what] + args
            sys.path[0] = os.path.dirname(os.path.realpath(what))
            runpy.run_path(what, run_name="__main__")
        elif mode == "module":
            # as `python -m` runs it: in a __main__ of its own (not the server's globals), the
            # module's file in argv[0]
            sys.argv = [what] + args
            sys.path[0] = os.getcwd()
            sys.modules["__main__"] = types.ModuleType("__main__")
            runpy._run_module_as_main(what, alter_argv=True)
        else:
            sys.argv = ["-c"] + args
            sys.path[0] = ""
            main = sys.modules["__main__"] = types.ModuleType("__main__")  # not the server's globals
            exec(compile(what, "<string>", "exec"), vars(main))
    except SystemExit:
        raise
    except KeyboardInterrupt:
        report(mode == "script")
        sys.stdout.flush()
        sys.stderr.flush()
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        os.kill(os.getpid(), signal.SIGINT)
    except BaseException:
        report(mode == "script")
        raise SystemExit(1)
    raise SystemExit(0)


def end_job(code):
    """What a cold interpreter's exit does that a job can see (threads joined, atexit, streams
    flushed), without tearing down the modules a fork shares: that is most of an exit's time."""
    try:
        threading = sys.modules.get("threading")
        if threading is not None:
            threading._shutdown()
        import atexit
        atexit._run_exitfuncs()
    finally:
        for f in (sys.stdout, sys.stderr):
            try:
                f.flush()
            except Exception:
                code = code or 120  # as Python exits when it cannot flush its streams
    os._exit(code)


if __name__ == "__main__":
    job = serve(int(sys.argv[1]), sys.argv[2:])
    try:
        run_job(job)
    except SystemExit as e:
        c = e.code
        if c is None:
            c = 0
        elif not isinstance(c, int):
            print(c, file=sys.stderr)
            c = 1
        end_job(c & 0xff)
