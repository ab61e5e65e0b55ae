/* shoal.agent._spawnc: the spawn helper's per-command path in C (issue 13).
 *
 * Optional: shoal.agent.launcher falls back to os.posix_spawn and os.waitpid without it
 * (or with SHOAL_NO_CSPAWN=1). It does what launcher._spawn_plain does for the common
 * command -- no env, cwd or stdin; stdout and stderr captured in memfds or sent to a given
 * descriptor -- and what the helper's reap does, with fewer steps than glibc's posix_spawn:
 *
 * - clone(CLONE_VM | CLONE_VFORK) on one stack mapped once, not a stack mmap'ed and
 *   munmap'ed per spawn (the munmap is a TLB shootdown on every CPU the helper ran on);
 * - the environment converted to a NULL-terminated block once per configuration (Env),
 *   not once per command;
 * - the two memfds made here, the exec error passed back in memory the child shares.
 *
 * The vfork child follows glibc's spawni.c and CPython's _posixsubprocess: every signal is
 * blocked around the clone (raw rt_sigprocmask, internal glibc signals included); the
 * child sets every caught signal, and SIGPIPE and SIGXFSZ (which Python ignores), back to
 * SIG_DFL before it restores the parent's mask; it allocates nothing, calls no Python, and
 * leaves by execve or _exit.
 */
#define _GNU_SOURCE
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <sched.h>
#include <signal.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#define STACK_SIZE (64 * 1024)
#define KSIGSET_SIZE (_NSIG / 8) /* the kernel's sigset_t: 8 bytes on Linux */

/* ---- Env: an environment as execve takes it ------------------------------------------ */

typedef struct {
    PyObject_HEAD
    char **envp;   /* NULL-terminated, pointing into block */
    char *block;
} EnvObject;

static void Env_dealloc(EnvObject *self) {
    PyMem_Free(self->envp);
    PyMem_Free(self->block);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

/* "KEY=VALUE" of one item, checked as os.posix_spawn checks it. */
static PyObject *env_item(PyObject *key, PyObject *value) {
    PyObject *k = NULL, *v = NULL, *kv = NULL;
    if (!PyUnicode_FSConverter(key, &k) || !PyUnicode_FSConverter(value, &v))
        goto done;
    if (PyBytes_GET_SIZE(k) == 0 || strchr(PyBytes_AS_STRING(k) + 1, '=') != NULL) {
        PyErr_SetString(PyExc_ValueError, "illegal environment variable name");
        goto done;
    }
    kv = PyBytes_FromFormat("%s=%s", PyBytes_AS_STRING(k), PyBytes_AS_STRING(v));
done:
    Py_XDECREF(k);
    Py_XDECREF(v);
    return kv;
}

static PyObject *Env_new(PyTypeObject *type, PyObject *args, PyObject *kwds) {
    (void)kwds;
    PyObject *mapping, *items = NULL, *encoded = NULL;
    if (!PyArg_ParseTuple(args, "O!:Env", &PyDict_Type, &mapping))
        return NULL;
    EnvObject *self = (EnvObject *)type->tp_alloc(type, 0);
    if (self == NULL)
        return NULL;
    items = PyDict_Items(mapping);
    if (items == NULL)
        goto fail;
    Py_ssize_t n = PyList_GET_SIZE(items);
    encoded = PyList_New(n);
    if (encoded == NULL)
        goto fail;
    size_t total = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *item = PyList_GET_ITEM(items, i);
        PyObject *kv = env_item(PyTuple_GET_ITEM(item, 0), PyTuple_GET_ITEM(item, 1));
        if (kv == NULL)
            goto fail;
        PyList_SET_ITEM(encoded, i, kv);
        total += (size_t)PyBytes_GET_SIZE(kv) + 1;
    }
    self->block = PyMem_Malloc(total ? total : 1);
    self->envp = PyMem_Malloc(sizeof(char *) * (size_t)(n + 1));
    if (self->block == NULL || self->envp == NULL) {
        PyErr_NoMemory();
        goto fail;
    }
    char *at = self->block;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *kv = PyList_GET_ITEM(encoded, i);
        size_t len = (size_t)PyBytes_GET_SIZE(kv) + 1;
        memcpy(at, PyBytes_AS_STRING(kv), len);
        self->envp[i] = at;
        at += len;
    }
    self->envp[n] = NULL;
    Py_DECREF(items);
    Py_DECREF(encoded);
    return (PyObject *)self;
fail:
    Py_XDECREF(items);
    Py_XDECREF(encoded);
    Py_DECREF(self);
    return NULL;
}

static PyTypeObject EnvType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "shoal.agent._spawnc.Env",
    .tp_basicsize = sizeof(EnvObject),
    .tp_dealloc = (destructor)Env_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "Env(mapping): an environment converted once for every spawn that uses it.",
    .tp_new = Env_new,
};

/* ---- the vfork child --------------------------------------------------------------- */

struct child_args {
    const char *path;
    char *const *argv;
    char *const *envp;
    int fds[3];               /* what becomes 0, 1, 2; -1: inherited as it is */
    const void *mask;         /* the parent's signal mask, restored before the exec */
    volatile int error;       /* the errno of what failed; 0 when the exec succeeded */
};

static char *child_stack;    /* STACK_SIZE bytes above a guard page, mapped once */

/* The signals a child sets back to SIG_DFL, when snapshot_signals() has listed them (the
 * spawn helper does, once its handlers are in place): reading every disposition in each
 * child costs ~62 sigaction calls, 12.8 us on the VM of issue 13, which its parent spends
 * waiting and the core spends before the command starts. -1: not listed, each child reads
 * them all. */
static int reset_count = -1;
static int reset_sigs[_NSIG];

/* Whether sig is to be set back to SIG_DFL in a child (see child_main). */
static int needs_reset(int sig) {
    struct sigaction old;
    if (sig == SIGKILL || sig == SIGSTOP)
        return 0;
    if (sig == SIGPIPE || sig == SIGXFSZ)
        return 1;
    if (sigaction(sig, NULL, &old) != 0)  /* glibc's own signals: EINVAL */
        return 0;
    return old.sa_handler != SIG_IGN && old.sa_handler != SIG_DFL;
}

static int child_main(void *p) {
    struct child_args *a = p;
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = SIG_DFL;
    /* The child shares the parent's memory: no handler of the parent may run in it. A
     * caught signal goes back to its default (exec would do it, after this code ran), and
     * so do SIGPIPE and SIGXFSZ, which Python ignores (subprocess's restore_signals). One
     * ignored otherwise stays ignored, as it would through posix_spawn. */
    if (reset_count >= 0) {
        for (int i = 0; i < reset_count; i++)
            sigaction(reset_sigs[i], &sa, NULL);
    } else {
        for (int sig = 1; sig < _NSIG; sig++)
            if (needs_reset(sig))
                sigaction(sig, &sa, NULL);
    }
    if (setsid() < 0)
        goto fail;
    for (int fd = 0; fd < 3; fd++) {
        int src = a->fds[fd];
        if (src < 0)
            continue;
        if (src == fd) {  /* dup2 would keep its close-on-exec flag */
            int flags = fcntl(fd, F_GETFD);
            if (flags < 0 || fcntl(fd, F_SETFD, flags & ~FD_CLOEXEC) < 0)
                goto fail;
        } else if (dup2(src, fd) < 0) {
            goto fail;
        }
    }
    syscall(SYS_rt_sigprocmask, SIG_SETMASK, a->mask, NULL, KSIGSET_SIZE);
    execve(a->path, a->argv, a->envp);
fail:
    a->error = errno ? errno : ECHILD;
    _exit(127);
}

/* ---- argv ------------------------------------------------------------------------ */

#define SMALL_ARGV 16

struct argv_buf {
    char *small[SMALL_ARGV + 1];
    char **argv;
    PyObject *keep;          /* a list holding the encoded strings */
};

static int argv_fill(struct argv_buf *b, PyObject *seq) {
    b->argv = b->small;
    b->keep = NULL;
    PyObject *fast = PySequence_Fast(seq, "argv must be a list or tuple");
    if (fast == NULL)
        return -1;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(fast);
    if (n < 1) {
        PyErr_SetString(PyExc_ValueError, "argv must not be empty");
        goto fail;
    }
    if (n > SMALL_ARGV) {
        b->argv = PyMem_Malloc(sizeof(char *) * (size_t)(n + 1));
        if (b->argv == NULL) {
            PyErr_NoMemory();
            goto fail;
        }
    }
    b->keep = PyList_New(n);
    if (b->keep == NULL)
        goto fail;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *enc = NULL;
        if (!PyUnicode_FSConverter(PySequence_Fast_GET_ITEM(fast, i), &enc))
            goto fail;
        PyList_SET_ITEM(b->keep, i, enc);
        b->argv[i] = PyBytes_AS_STRING(enc);
    }
    b->argv[n] = NULL;
    Py_DECREF(fast);
    return 0;
fail:
    Py_DECREF(fast);
    return -1;
}

static void argv_free(struct argv_buf *b) {
    if (b->argv != b->small)
        PyMem_Free(b->argv);
    Py_XDECREF(b->keep);
}

/* ---- spawn ------------------------------------------------------------------------ */

static int make_stack(void) {
    if (child_stack != NULL)
        return 0;
    long page = sysconf(_SC_PAGESIZE);
    char *m = mmap(NULL, STACK_SIZE + page, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_STACK, -1, 0);
    if (m == MAP_FAILED)
        return -1;
    if (mprotect(m, page, PROT_NONE) < 0) {  /* a guard page below the stack */
        munmap(m, STACK_SIZE + page);
        return -1;
    }
    child_stack = m + page;
    return 0;
}

/* A Python int as a C int (_PyLong_AsInt is private, and gone in Python 3.13). */
static int as_int(PyObject *obj, int *out) {
    long v = PyLong_AsLong(obj);
    if (v == -1 && PyErr_Occurred())
        return -1;
    if (v < INT_MIN || v > INT_MAX) {
        PyErr_SetString(PyExc_OverflowError, "descriptor out of range");
        return -1;
    }
    *out = (int)v;
    return 0;
}

/* The stream argument: -1 a new memfd (returned), -2 inherited, else a descriptor. */
static int stream_fd(int mode, const char *name, int *made) {
    *made = -1;
    if (mode != -1)
        return mode == -2 ? -1 : mode;
    int fd = memfd_create(name, MFD_CLOEXEC);
    if (fd >= 0)
        *made = fd;
    return fd;
}

PyDoc_STRVAR(spawn_doc,
"spawn(path, argv, env, stdout, stderr, stdin) -> (pid, stdout_memfd, stderr_memfd)\n\n"
"Start ``argv`` (``path`` is the program, looked up already) in a session of its own with\n"
"``env`` (an Env). ``stdout``/``stderr``: -1 captures the stream in a new memfd (returned;\n"
"-1 otherwise), -2 leaves it inherited, any other value is the descriptor it goes to.\n"
"``stdin``: the descriptor for 0, or -1 to inherit it. OSError (filename ``path``) when\n"
"the program cannot be started: the memfds are closed then.");

static PyObject *spawnc_spawn(PyObject *mod, PyObject *const *args, Py_ssize_t nargs) {
    (void)mod;
    if (nargs != 6) {
        PyErr_SetString(PyExc_TypeError, "spawn() takes 6 arguments");
        return NULL;
    }
    PyObject *path_obj = args[0];
    if (Py_TYPE(args[2]) != &EnvType) {
        PyErr_SetString(PyExc_TypeError, "env must be an Env");
        return NULL;
    }
    int out_mode, err_mode, in_fd;
    if (as_int(args[3], &out_mode) < 0 || as_int(args[4], &err_mode) < 0
            || as_int(args[5], &in_fd) < 0)
        return NULL;
    PyObject *path = NULL;
    if (!PyUnicode_FSConverter(path_obj, &path))
        return NULL;
    struct argv_buf av;
    if (argv_fill(&av, args[1]) < 0) {
        argv_free(&av);
        Py_DECREF(path);
        return NULL;
    }
    if (make_stack() < 0) {
        PyErr_SetFromErrno(PyExc_OSError);
        goto fail;
    }
    int out_made, err_made;
    struct child_args ca;
    ca.path = PyBytes_AS_STRING(path);
    ca.argv = av.argv;
    ca.envp = ((EnvObject *)args[2])->envp;
    ca.fds[0] = in_fd;
    ca.fds[1] = stream_fd(out_mode, "shoal-stdout", &out_made);
    if (out_mode == -1 && out_made < 0) {
        PyErr_SetFromErrno(PyExc_OSError);
        goto fail;
    }
    ca.fds[2] = stream_fd(err_mode, "shoal-stderr", &err_made);
    if (err_mode == -1 && err_made < 0) {
        PyErr_SetFromErrno(PyExc_OSError);
        if (out_made >= 0)
            close(out_made);
        goto fail;
    }
    ca.error = 0;

    /* The GIL stays held through the clone and the vfork wait: the one stack is shared by
     * every spawn of this process, so two threads must not spawn at once. */
    unsigned char all[KSIGSET_SIZE], old[KSIGSET_SIZE];
    memset(all, 0xff, sizeof all);
    ca.mask = old;
    /* All signals blocked: none may run a handler in the child before it resets them. */
    syscall(SYS_rt_sigprocmask, SIG_BLOCK, all, old, KSIGSET_SIZE);
    pid_t pid = clone(child_main, child_stack + STACK_SIZE, CLONE_VM | CLONE_VFORK | SIGCHLD,
                      &ca);
    int clone_errno = errno;
    syscall(SYS_rt_sigprocmask, SIG_SETMASK, old, NULL, KSIGSET_SIZE);

    int error = pid < 0 ? clone_errno : ca.error;
    if (error) {
        if (pid > 0) {  /* it exited (127): collect it */
            while (waitpid(pid, NULL, 0) < 0 && errno == EINTR)
                ;
        }
        if (out_made >= 0)
            close(out_made);
        if (err_made >= 0)
            close(err_made);
        errno = error;
        PyErr_SetFromErrnoWithFilenameObject(PyExc_OSError, path_obj);
        goto fail;
    }
    argv_free(&av);
    Py_DECREF(path);
    return Py_BuildValue("(iii)", (int)pid, out_made, err_made);
fail:
    argv_free(&av);
    Py_DECREF(path);
    return NULL;
}

/* ---- reap ------------------------------------------------------------------------- */

PyDoc_STRVAR(reap_doc,
"reap() -> [(pid, exitcode), ...]\n\n"
"Collect every child that has exited, each after a SIGKILL to its process group (what it\n"
"left running in its session; the exited leader is still a zombie then, so the group id\n"
"is still its own). ``exitcode`` as os.waitstatus_to_exitcode gives it.");

static PyObject *spawnc_reap(PyObject *mod, PyObject *unused) {
    (void)mod;
    (void)unused;
    PyObject *out = PyList_New(0);
    if (out == NULL)
        return NULL;
    for (;;) {
        siginfo_t info;
        info.si_pid = 0;
        if (waitid(P_ALL, 0, &info, WEXITED | WNOHANG | WNOWAIT) < 0) {
            if (errno == EINTR)
                continue;
            break;  /* ECHILD: no child left */
        }
        pid_t pid = info.si_pid;
        if (pid == 0)
            break;
        killpg(pid, SIGKILL);
        int status;
        pid_t got;
        while ((got = waitpid(pid, &status, WNOHANG)) < 0 && errno == EINTR)
            ;
        if (got <= 0)
            break;  /* someone else collected it: nothing more to do */
        int code = WIFSIGNALED(status) ? -WTERMSIG(status) : WEXITSTATUS(status);
        PyObject *pair = Py_BuildValue("(ii)", (int)pid, code);
        if (pair == NULL || PyList_Append(out, pair) < 0) {
            Py_XDECREF(pair);
            Py_DECREF(out);
            return NULL;
        }
        Py_DECREF(pair);
    }
    return out;
}

/* ---- signal snapshot ---------------------------------------------------------------- */

PyDoc_STRVAR(snapshot_doc,
"snapshot_signals(on=True) -> [signal, ...]\n\n"
"List, once, the signals every child sets back to SIG_DFL before its exec: those this\n"
"process catches now, and SIGPIPE and SIGXFSZ. Until then (or after on=False), each child\n"
"reads every disposition itself, as glibc's posix_spawn does. A process that changes its\n"
"handlers afterwards calls it again. Returns the list (empty for on=False).");

static PyObject *spawnc_snapshot(PyObject *mod, PyObject *const *args, Py_ssize_t nargs) {
    (void)mod;
    int on = 1;
    if (nargs > 1) {
        PyErr_SetString(PyExc_TypeError, "snapshot_signals() takes at most 1 argument");
        return NULL;
    }
    if (nargs == 1 && (on = PyObject_IsTrue(args[0])) < 0)
        return NULL;
    int n = 0;
    if (on) {
        for (int sig = 1; sig < _NSIG; sig++)
            if (needs_reset(sig))
                reset_sigs[n++] = sig;
    }
    reset_count = on ? n : -1;
    PyObject *out = PyList_New(n);
    if (out == NULL)
        return NULL;
    for (int i = 0; i < n; i++) {
        PyObject *v = PyLong_FromLong(reset_sigs[i]);
        if (v == NULL) {
            Py_DECREF(out);
            return NULL;
        }
        PyList_SET_ITEM(out, i, v);
    }
    return out;
}

static PyMethodDef spawnc_methods[] = {
    {"snapshot_signals", (PyCFunction)(void (*)(void))spawnc_snapshot, METH_FASTCALL,
     snapshot_doc},
    {"spawn", (PyCFunction)(void (*)(void))spawnc_spawn, METH_FASTCALL, spawn_doc},
    {"reap", spawnc_reap, METH_NOARGS, reap_doc},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef spawnc_module = {
    PyModuleDef_HEAD_INIT, "shoal.agent._spawnc",
    "The spawn helper's per-command path in C (see the source's head comment).", -1,
    spawnc_methods,
};

PyMODINIT_FUNC PyInit__spawnc(void) {
    if (PyType_Ready(&EnvType) < 0)
        return NULL;
    PyObject *m = PyModule_Create(&spawnc_module);
    if (m == NULL)
        return NULL;
    Py_INCREF(&EnvType);
    if (PyModule_AddObject(m, "Env", (PyObject *)&EnvType) < 0) {
        Py_DECREF(&EnvType);
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
