/* epochal.dataflow.queries._answer: the worker's answer to the common query, a read_uncommitted
 * lookup of a heap state, without running Python bytecode (issue 37; see native.py for the
 * contract and docs/queryable_state.md for why).
 *
 * Answerer(scratch, token, states, lookup_kind, values_kind, loads, dumps, protocol):
 *   scratch      a writable buffer every read of a query connection goes into (kept until freed)
 *   token        the job's query token (bytes)
 *   states       {query name: (table, first key group, key group after the last, max parallelism)}
 *                for the states it may answer; the caller changes it in place
 *   lookup_kind, values_kind   the kinds of Lookup and Values on the wire (wire.KINDS)
 *   loads, dumps, protocol     pickle.loads, pickle.dumps and the protocol to write answers in
 *
 * answerer.answer(fd) reads once from the non-blocking socket fd into scratch, then:
 *   -1      nothing to read (EAGAIN);
 *   None    the read was one whole request frame it answered, and the answer frame was sent whole;
 *   bytes   the same, but the socket took only part of the answer: the caller sends the rest;
 *   n >= 0  the read's n bytes (0: the peer closed, or the socket failed) are in scratch, not
 *           answered: the caller handles them as if it had read them itself.
 * It answers only a frame that is exactly one request with the right token, a Lookup at
 * read_uncommitted of a state in `states`, every key a str, bytes or int (not bool) of a key group
 * in the state's range, every group's entries a dict; anything else is the caller's. Reads only:
 * what it declines, the caller answers from the same bytes. Holds the interpreter lock throughout,
 * as the processing thread that calls it between batches does. */

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <errno.h>
#include <limits.h>
#include <stdint.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/uio.h>

#include "../../_murmur3.h"

#define HEADER 4
#define TOKEN 32
#define MAX_KEYS 1024

/* The key group of key as epochal.plan.keygroups.key_group_of gives it, for a str, bytes or int
 * key; -1 for any other key or a str that UTF-8 cannot encode (no exception left set). */
static long key_group(PyObject *key, long max_parallelism) {
    const char *data;
    Py_ssize_t len;
    uint32_t h;
    if (PyUnicode_CheckExact(key)) {
        data = PyUnicode_AsUTF8AndSize(key, &len);
        if (data == NULL) {
            PyErr_Clear();
            return -1;
        }
        h = murmur3_32((const unsigned char *)data, (size_t)len);
    } else if (PyBytes_CheckExact(key)) {
        h = murmur3_32((const unsigned char *)PyBytes_AS_STRING(key), (size_t)PyBytes_GET_SIZE(key));
    } else if (PyLong_CheckExact(key)) {
        PyObject *text = PyObject_Str(key);
        if (text == NULL) {
            PyErr_Clear();
            return -1;
        }
        data = PyUnicode_AsUTF8AndSize(text, &len);
        h = data == NULL ? 0 : murmur3_32((const unsigned char *)data, (size_t)len);
        Py_DECREF(text);
        if (data == NULL) {
            PyErr_Clear();
            return -1;
        }
    } else {
        return -1;
    }
    return (long)(h % (uint32_t)max_parallelism);
}

typedef struct {
    PyObject_HEAD
    Py_buffer scratch;
    int has_scratch;
    unsigned char token[TOKEN];
    PyObject *states, *lookup_kind, *values_kind, *loads, *dumps, *protocol, *read_uncommitted;
} Answerer;

static int Answerer_init(Answerer *a, PyObject *args, PyObject *kwargs) {
    PyObject *scratch, *states, *lookup_kind, *values_kind, *loads, *dumps, *protocol;
    Py_buffer token;
    if (!PyArg_ParseTuple(args, "Oy*O!OOOOO", &scratch, &token, &PyDict_Type, &states, &lookup_kind, &values_kind,
                          &loads, &dumps, &protocol))
        return -1;
    if (token.len != TOKEN) {
        PyBuffer_Release(&token);
        PyErr_Format(PyExc_ValueError, "a query token has %d bytes, not %zd", TOKEN, token.len);
        return -1;
    }
    memcpy(a->token, token.buf, TOKEN);
    PyBuffer_Release(&token);
    if (a->has_scratch)
        PyBuffer_Release(&a->scratch);
    a->has_scratch = 0;
    if (PyObject_GetBuffer(scratch, &a->scratch, PyBUF_WRITABLE | PyBUF_C_CONTIGUOUS) < 0)
        return -1;
    a->has_scratch = 1;
    if (a->scratch.len <= HEADER + TOKEN) {
        PyErr_SetString(PyExc_ValueError, "the scratch buffer is too small for a request");
        return -1;
    }
    PyObject *read_uncommitted = PyUnicode_InternFromString("read_uncommitted");
    if (read_uncommitted == NULL)
        return -1;
    Py_XSETREF(a->read_uncommitted, read_uncommitted);
    PyObject **fields[] = {&a->states, &a->lookup_kind, &a->values_kind, &a->loads, &a->dumps, &a->protocol};
    PyObject *given[] = {states, lookup_kind, values_kind, loads, dumps, protocol};
    for (size_t i = 0; i < sizeof(given) / sizeof(given[0]); i++)
        Py_XSETREF(*fields[i], Py_NewRef(given[i]));
    return 0;
}

/* The answer payload (a new reference; NULL with no exception set: the caller's) to the request
 * payload at p of n bytes. */
static PyObject *answer_payload(Answerer *a, const char *p, Py_ssize_t n) {
    PyObject *body = PyBytes_FromStringAndSize(p, n); /* (a copy: nothing unpickled may alias scratch) */
    if (body == NULL) {
        PyErr_Clear();
        return NULL;
    }
    PyObject *request = PyObject_CallOneArg(a->loads, body);
    Py_DECREF(body);
    PyObject *found = NULL, *values = NULL, *group_id = NULL, *answer = NULL, *payload = NULL;
    if (request == NULL || !PyTuple_CheckExact(request) || PyTuple_GET_SIZE(request) != 5)
        goto done;
    PyObject *kind = PyTuple_GET_ITEM(request, 0), *state = PyTuple_GET_ITEM(request, 2);
    PyObject *keys = PyTuple_GET_ITEM(request, 3), *level = PyTuple_GET_ITEM(request, 4);
    if (!PyLong_CheckExact(kind) || PyObject_RichCompareBool(kind, a->lookup_kind, Py_EQ) != 1)
        goto done;
    if (!PyUnicode_CheckExact(level) || (level != a->read_uncommitted && PyUnicode_Compare(level, a->read_uncommitted) != 0))
        goto done;
    if (!PyUnicode_CheckExact(state) || !PyTuple_CheckExact(keys))
        goto done;
    Py_ssize_t count = PyTuple_GET_SIZE(keys);
    if (count == 0 || count > MAX_KEYS)
        goto done;
    PyObject *served = PyDict_GetItemWithError(a->states, state); /* borrowed */
    if (served == NULL || !PyTuple_CheckExact(served) || PyTuple_GET_SIZE(served) != 4)
        goto done;
    PyObject *table = PyTuple_GET_ITEM(served, 0);
    long first = PyLong_AsLong(PyTuple_GET_ITEM(served, 1));
    long stop = PyLong_AsLong(PyTuple_GET_ITEM(served, 2));
    long max_parallelism = PyLong_AsLong(PyTuple_GET_ITEM(served, 3));
    if (PyErr_Occurred() || !PyDict_CheckExact(table) || max_parallelism <= 0)
        goto done;
    found = PyTuple_New(count);
    values = PyTuple_New(count);
    if (found == NULL || values == NULL)
        goto done;
    for (Py_ssize_t i = 0; i < count; i++) {
        PyObject *key = PyTuple_GET_ITEM(keys, i);
        long group = key_group(key, max_parallelism);
        if (group < first || group >= stop) /* (also -1: a key the caller groups) */
            goto done;
        group_id = PyLong_FromLong(group);
        if (group_id == NULL)
            goto done;
        PyObject *entries = PyDict_GetItemWithError(table, group_id); /* borrowed */
        Py_CLEAR(group_id);
        if (entries == NULL || !PyDict_Check(entries))
            goto done;
        PyObject *value = PyDict_GetItemWithError(entries, key); /* borrowed */
        if (value == NULL && PyErr_Occurred())
            goto done;
        PyObject *shown = value == NULL ? Py_None : value;
        Py_INCREF(shown);
        PyTuple_SET_ITEM(values, i, shown);
        PyObject *flag = value == NULL ? Py_False : Py_True;
        Py_INCREF(flag);
        PyTuple_SET_ITEM(found, i, flag);
    }
    answer = PyTuple_Pack(5, a->values_kind, PyTuple_GET_ITEM(request, 1), found, values, Py_None);
    if (answer != NULL)
        payload = PyObject_CallFunctionObjArgs(a->dumps, answer, a->protocol, NULL);
    if (payload != NULL && !PyBytes_CheckExact(payload))
        Py_CLEAR(payload);
done:
    Py_XDECREF(request);
    Py_XDECREF(found);
    Py_XDECREF(values);
    Py_XDECREF(group_id);
    Py_XDECREF(answer);
    if (payload == NULL)
        PyErr_Clear();
    return payload;
}

static PyObject *Answerer_answer(Answerer *a, PyObject *arg) {
    long descriptor = PyLong_AsLong(arg);
    if (descriptor == -1 && PyErr_Occurred())
        return NULL;
    if (descriptor < 0 || descriptor > INT_MAX) {
        PyErr_SetString(PyExc_ValueError, "not a file descriptor");
        return NULL;
    }
    int fd = (int)descriptor;
    char *buf = (char *)a->scratch.buf;
    ssize_t received;
    do
        received = recv(fd, buf, (size_t)a->scratch.len, 0);
    while (received < 0 && errno == EINTR);
    if (received < 0)
        return PyLong_FromLong(errno == EAGAIN || errno == EWOULDBLOCK ? -1 : 0);
    if (received < HEADER + TOKEN)
        return PyLong_FromSsize_t(received);
    const unsigned char *p = (const unsigned char *)buf;
    uint32_t length = (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | (uint32_t)p[3];
    if ((ssize_t)length != received - HEADER)
        return PyLong_FromSsize_t(received);
    unsigned char differ = 0;
    for (int i = 0; i < TOKEN; i++)
        differ |= p[HEADER + i] ^ a->token[i];
    if (differ)
        return PyLong_FromSsize_t(received);
    PyObject *payload = answer_payload(a, buf + HEADER + TOKEN, received - HEADER - TOKEN);
    if (payload == NULL)
        return PyLong_FromSsize_t(received);
    Py_ssize_t size = PyBytes_GET_SIZE(payload);
    unsigned char header[HEADER] = {(unsigned char)(size >> 24), (unsigned char)(size >> 16),
                                    (unsigned char)(size >> 8), (unsigned char)size};
    struct iovec parts[2] = {{header, HEADER}, {PyBytes_AS_STRING(payload), (size_t)size}};
    struct msghdr message = {.msg_iov = parts, .msg_iovlen = 2};
    ssize_t sent;
    do
        sent = sendmsg(fd, &message, MSG_NOSIGNAL);
    while (sent < 0 && errno == EINTR);
    PyObject *out;
    if (sent == HEADER + size) {
        out = Py_None;
        Py_INCREF(out);
    } else if (sent < 0 && errno != EAGAIN && errno != EWOULDBLOCK) {
        out = PyLong_FromLong(0); /* the caller closes the connection, as after a failed send */
    } else {
        size_t done = sent < 0 ? 0 : (size_t)sent;
        out = PyBytes_FromStringAndSize(NULL, HEADER + size - (Py_ssize_t)done);
        if (out != NULL) {
            char *rest = PyBytes_AS_STRING(out);
            size_t from_header = done < HEADER ? HEADER - done : 0;
            memcpy(rest, header + (HEADER - from_header), from_header);
            memcpy(rest + from_header, PyBytes_AS_STRING(payload) + (done > HEADER ? done - HEADER : 0),
                   (size_t)size - (done > HEADER ? done - HEADER : 0));
        }
    }
    Py_DECREF(payload);
    return out;
}

/* key_group(key, max_parallelism): the group answer() computes, -1 where it leaves the key to the caller. */
static PyObject *key_group_of(PyObject *self, PyObject *args) {
    PyObject *key;
    long max_parallelism;
    if (!PyArg_ParseTuple(args, "Ol", &key, &max_parallelism))
        return NULL;
    if (max_parallelism <= 0) {
        PyErr_SetString(PyExc_ValueError, "max_parallelism must be positive");
        return NULL;
    }
    return PyLong_FromLong(key_group(key, max_parallelism));
}

static void Answerer_dealloc(Answerer *a) {
    if (a->has_scratch)
        PyBuffer_Release(&a->scratch);
    Py_XDECREF(a->states);
    Py_XDECREF(a->lookup_kind);
    Py_XDECREF(a->values_kind);
    Py_XDECREF(a->loads);
    Py_XDECREF(a->dumps);
    Py_XDECREF(a->protocol);
    Py_XDECREF(a->read_uncommitted);
    Py_TYPE(a)->tp_free((PyObject *)a);
}

static PyMethodDef answerer_methods[] = {
    {"answer", (PyCFunction)Answerer_answer, METH_O,
     "answer(fd) -> None | bytes | int: read once from fd and answer a lone read_uncommitted lookup (see the "
     "module's source): None answered, bytes answered with this rest unsent, -1 nothing read, n >= 0 the "
     "caller's n bytes in scratch."},
    {NULL, NULL, 0, NULL},
};

static PyTypeObject AnswererType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "epochal.dataflow.queries._answer.Answerer",
    .tp_basicsize = sizeof(Answerer),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "Answerer(scratch, token, states, lookup_kind, values_kind, loads, dumps, protocol)",
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)Answerer_init,
    .tp_dealloc = (destructor)Answerer_dealloc,
    .tp_methods = answerer_methods,
};

static PyMethodDef methods[] = {
    {"key_group", key_group_of, METH_VARARGS,
     "key_group(key, max_parallelism): the key group answer() computes for key, -1 where it leaves it to the caller."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_answer", NULL, -1, methods, NULL, NULL, NULL, NULL};

PyMODINIT_FUNC PyInit__answer(void) {
    if (PyType_Ready(&AnswererType) < 0)
        return NULL;
    PyObject *m = PyModule_Create(&module);
    if (m == NULL)
        return NULL;
    Py_INCREF(&AnswererType);
    if (PyModule_AddObject(m, "Answerer", (PyObject *)&AnswererType) < 0) {
        Py_DECREF(&AnswererType);
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
