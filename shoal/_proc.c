/* shoal._proc: the two process-control calls every shoal process makes at its start,
 * without ctypes.
 *
 * The local runtime's starter, head, agent, spawn helper and workers each ask Linux for a
 * parent-death signal (prctl), and the head and the agent write their own command line
 * over the starter's (what `ps` shows). Through ctypes that cost ~3 ms of the cold start's
 * critical path: the import of ctypes (its shared library and some 100 classes) comes
 * before the starter may fork the head and the agent. This module is built where a C
 * compiler exists (setup.py, optional); shoal._sys and shoal.launch.boot fall back to
 * ctypes without it. */

#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>

extern char **environ;

PyDoc_STRVAR(set_pdeathsig_doc,
"set_pdeathsig(sig)\n\n"
"prctl(PR_SET_PDEATHSIG, sig): this process gets ``sig`` when its parent dies.");

static PyObject *
set_pdeathsig(PyObject *Py_UNUSED(module), PyObject *arg)
{
    long sig = PyLong_AsLong(arg);
    if (sig == -1 && PyErr_Occurred())
        return NULL;
    if (prctl(PR_SET_PDEATHSIG, (unsigned long)sig, 0UL, 0UL, 0UL) != 0)
        return PyErr_SetFromErrno(PyExc_OSError);
    Py_RETURN_NONE;
}

PyDoc_STRVAR(write_at_doc,
"write_at(address, data)\n\n"
"Copy ``data`` to ``address`` in this process (the command line's own memory, from\n"
"/proc/self/stat; the caller checks the bounds).");

static PyObject *
write_at(PyObject *Py_UNUSED(module), PyObject *args)
{
    unsigned long long address;
    Py_buffer data;
    if (!PyArg_ParseTuple(args, "Ky*:write_at", &address, &data))
        return NULL;
    memmove((void *)(uintptr_t)address, data.buf, (size_t)data.len);
    PyBuffer_Release(&data);
    Py_RETURN_NONE;
}

PyDoc_STRVAR(move_environ_doc,
"move_environ(start, end) -> bool\n\n"
"Copy every C ``environ`` string that lies in [start, end) to memory of its own (kept\n"
"for the life of the process and its forks), so that area may be overwritten; False\n"
"when a copy could not be made (nothing is overwritten then).");

static PyObject *
move_environ(PyObject *Py_UNUSED(module), PyObject *args)
{
    unsigned long long start, end;
    if (!PyArg_ParseTuple(args, "KK:move_environ", &start, &end))
        return NULL;
    if (environ == NULL)
        Py_RETURN_TRUE;
    for (char **slot = environ; *slot != NULL; slot++) {
        uintptr_t at = (uintptr_t)*slot;
        if (at >= start && at < end) {
            char *copy = strdup(*slot);
            if (copy == NULL)
                Py_RETURN_FALSE;
            *slot = copy;
        }
    }
    Py_RETURN_TRUE;
}

static PyMethodDef methods[] = {
    {"set_pdeathsig", set_pdeathsig, METH_O, set_pdeathsig_doc},
    {"write_at", write_at, METH_VARARGS, write_at_doc},
    {"move_environ", move_environ, METH_VARARGS, move_environ_doc},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "shoal._proc",
    "Process-control calls of every shoal process's start, without ctypes (see _proc.c).",
    -1, methods, NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC
PyInit__proc(void)
{
    return PyModule_Create(&module);
}
