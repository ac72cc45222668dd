/* epochal.plan._column_keygroups: the key groups of a batch's key columns, computed over the
 * columns' Arrow buffers without a Python call per row (see column_keygroups.py for the contract:
 * exactly epochal.plan.keygroups.key_group_of of each row's key).
 *
 * key_groups(out, max_parallelism, columns) -> None
 *   out              a writable buffer of n int32 (a numpy int32 array): the result, one per row
 *   max_parallelism  1 <= max_parallelism <= 2**31
 *   columns          a sequence of one or more tuples, one per key column, all n rows long:
 *                    (kind, tag, offset, validity, offsets, data, width)
 *     kind      BINARY32 / BINARY64: variable-length values with int32 / int64 offsets
 *               (string, binary and their large forms); FIXED: fixed_size_binary of `width`
 *               bytes; INT / UINT: signed / unsigned integers of `width` bytes (1, 2, 4, 8);
 *               BOOL: a bitmap of values; NULL: every row null (Arrow's null type)
 *     tag       the type tag of stable_key_bytes: 's', 'y' or 'i'; 0 for a BINARY column whose
 *               values are already stable_key_bytes of the row's value (tag included): a column
 *               the caller encoded in Python; ignored for NULL
 *     offset    the array's offset (rows and bits are counted from there)
 *     validity  the validity bitmap, or None where no row is null
 *     offsets   the offsets buffer (BINARY32/64), else None
 *     data      the values buffer (None: empty)
 *     width     the byte width (FIXED, INT, UINT), else ignored
 *
 * A row's bytes are key_group_bytes of its key: for one column the untagged value (str as UTF-8,
 * bytes as is, an int's decimal digits, a bool as "1"/"0") or "n" for a null; for several the
 * encoding of the tuple, "t" + be32(count) + per item be32(len) + the tagged item. The key group
 * is murmur3_x86_32(bytes, seed 0) % max_parallelism. Buffers are bounds-checked (ValueError, no
 * crash, on an offset outside its data); string data is taken as valid UTF-8 (Arrow's contract).
 * The rows are hashed without the interpreter lock. */

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "../_murmur3.h"

enum { BINARY32 = 0, BINARY64 = 1, FIXED = 2, INT = 3, UINT = 4, BOOL = 5, NULLS = 6 };

/* The same hash of bytes this row has just written (an int's digits, a tuple's encoding), read a
 * byte at a time: a 4-byte load over several recent smaller stores cannot be forwarded from them
 * and waits until they reach the cache (measured: the 1M int64 keys
 * 0..999999 in 16 ms with murmur3_32, in 8 ms so). */
static uint32_t murmur3_32_fresh(const unsigned char *data, size_t len) {
    const volatile unsigned char *bytes = data; /* volatile: the compiler must not merge the loads */
    uint32_t h = 0;
    size_t blocks = len / 4;
    for (size_t i = 0; i < blocks; i++) {
        const volatile unsigned char *p = bytes + 4 * i;
        h = murmur3_mix_block(h, (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24);
    }
    return murmur3_finish(h, data + 4 * blocks, len);
}

typedef struct {
    int kind;
    unsigned char tag;
    Py_ssize_t offset;
    Py_ssize_t width;
    const unsigned char *validity; /* NULL: no row is null */
    const unsigned char *offsets;
    const unsigned char *data;
    Py_ssize_t data_len;
    Py_buffer views[3];
    int held[3];
} Column;

static const char PAIRS[201] =
    "00010203040506070809101112131415161718192021222324252627282930313233343536373839"
    "40414243444546474849505152535455565758596061626364656667686970717273747576777879"
    "8081828384858687888990919293949596979899";

/* The decimal digits of the magnitude (negative: with a leading '-'), written so they end just
 * before `end` (at most 21 characters); returns the first. Python's str(int) of an int64 or
 * uint64. Two digits a division, in 32 bits once the rest fits (the division is the cost). */
static char *digits(uint64_t magnitude, int negative, char *end) {
    char *p = end;
    while (magnitude > UINT32_MAX) {
        unsigned pair = (unsigned)(magnitude % 100);
        magnitude /= 100;
        p -= 2;
        memcpy(p, PAIRS + 2 * pair, 2);
    }
    uint32_t rest = (uint32_t)magnitude;
    while (rest >= 100) {
        unsigned pair = rest % 100;
        rest /= 100;
        p -= 2;
        memcpy(p, PAIRS + 2 * pair, 2);
    }
    if (rest >= 10) {
        p -= 2;
        memcpy(p, PAIRS + 2 * rest, 2);
    } else {
        *--p = (char)('0' + rest);
    }
    if (negative)
        *--p = '-';
    return p;
}

/* The row's value in column c: *ptr and *len its untagged bytes (scratch holds digits), *tag its type
 * tag ('n' for a null, with no bytes). Returns 0, or -1 where an offset lies outside the data. */
static int item(const Column *c, Py_ssize_t row, char *scratch_end, const unsigned char **ptr, size_t *len,
                unsigned char *tag) {
    Py_ssize_t i = c->offset + row;
    if (c->kind == NULLS || (c->validity && !((c->validity[i >> 3] >> (i & 7)) & 1))) {
        *ptr = (const unsigned char *)"";
        *len = 0;
        *tag = 'n';
        return 0;
    }
    *tag = c->tag;
    switch (c->kind) {
    case BINARY32:
    case BINARY64: {
        int64_t start, end;
        if (c->kind == BINARY32) {
            int32_t s, e;
            memcpy(&s, c->offsets + 4 * i, 4);
            memcpy(&e, c->offsets + 4 * (i + 1), 4);
            start = s;
            end = e;
        } else {
            memcpy(&start, c->offsets + 8 * i, 8);
            memcpy(&end, c->offsets + 8 * (i + 1), 8);
        }
        if (start < 0 || end < start || end > (int64_t)c->data_len)
            return -1;
        *ptr = c->data + start;
        *len = (size_t)(end - start);
        return 0;
    }
    case FIXED:
        if (c->width == 0) {
            *ptr = (const unsigned char *)"";
            *len = 0;
            return 0;
        }
        *ptr = c->data + (size_t)i * (size_t)c->width;
        *len = (size_t)c->width;
        return 0;
    case BOOL:
        *ptr = (const unsigned char *)(((c->data[i >> 3] >> (i & 7)) & 1) ? "1" : "0");
        *len = 1;
        return 0;
    default: { /* INT, UINT */
        const unsigned char *p = c->data + (size_t)i * (size_t)c->width;
        uint64_t magnitude;
        int negative = 0;
        if (c->kind == INT) {
            int64_t v;
            switch (c->width) {
            case 1: { int8_t x; memcpy(&x, p, 1); v = x; break; }
            case 2: { int16_t x; memcpy(&x, p, 2); v = x; break; }
            case 4: { int32_t x; memcpy(&x, p, 4); v = x; break; }
            default: memcpy(&v, p, 8);
            }
            negative = v < 0;
            magnitude = negative ? (uint64_t)0 - (uint64_t)v : (uint64_t)v;
        } else {
            switch (c->width) {
            case 1: { uint8_t x; memcpy(&x, p, 1); magnitude = x; break; }
            case 2: { uint16_t x; memcpy(&x, p, 2); magnitude = x; break; }
            case 4: { uint32_t x; memcpy(&x, p, 4); magnitude = x; break; }
            default: memcpy(&magnitude, p, 8);
            }
        }
        char *first = digits(magnitude, negative, scratch_end);
        *ptr = (const unsigned char *)first;
        *len = (size_t)(scratch_end - first);
        return 0;
    }
    }
}

static void put_be32(unsigned char *p, uint32_t v) {
    p[0] = (unsigned char)(v >> 24);
    p[1] = (unsigned char)(v >> 16);
    p[2] = (unsigned char)(v >> 8);
    p[3] = (unsigned char)v;
}

/* Fills out[0..n) ; returns 0, -1 for an offset outside its data, -2 for no memory. */
static int hash_rows(const Column *cols, Py_ssize_t ncols, Py_ssize_t n, uint32_t m, int32_t *out) {
    char scratch[24];
    char *scratch_end = scratch + sizeof scratch;
    const unsigned char *ptr;
    size_t len;
    unsigned char tag;
    if (ncols == 1) {
        const Column *c = &cols[0];
        for (Py_ssize_t row = 0; row < n; row++) {
            if (item(c, row, scratch_end, &ptr, &len, &tag) < 0)
                return -1;
            if (tag == 'n') {
                ptr = (const unsigned char *)"n";
                len = 1;
            } else if (tag == 0 && len > 0 && (ptr[0] == 's' || ptr[0] == 'i' || ptr[0] == 'y')) {
                ptr++; /* already encoded: key_group_bytes drops a scalar's tag */
                len--;
            }
            uint32_t h = c->kind == INT || c->kind == UINT ? murmur3_32_fresh(ptr, len) : murmur3_32(ptr, len);
            out[row] = (int32_t)(h % m);
        }
        return 0;
    }
    size_t cap = 256;
    unsigned char *buf = malloc(cap);
    if (!buf)
        return -2;
    for (Py_ssize_t row = 0; row < n; row++) {
        size_t used = 5;
        buf[0] = 't';
        put_be32(buf + 1, (uint32_t)ncols);
        for (Py_ssize_t j = 0; j < ncols; j++) {
            if (item(&cols[j], row, scratch_end, &ptr, &len, &tag) < 0) {
                free(buf);
                return -1;
            }
            size_t whole = len + (tag != 0);
            if (whole > UINT32_MAX) {
                free(buf);
                return -1;
            }
            if (used + 4 + whole > cap) {
                size_t want = cap;
                while (used + 4 + whole > want)
                    want *= 2;
                unsigned char *grown = realloc(buf, want);
                if (!grown) {
                    free(buf);
                    return -2;
                }
                buf = grown;
                cap = want;
            }
            put_be32(buf + used, (uint32_t)whole);
            used += 4;
            if (tag)
                buf[used++] = tag;
            if (len) {
                memcpy(buf + used, ptr, len);
                used += len;
            }
        }
        out[row] = (int32_t)(murmur3_32_fresh(buf, used) % m);
    }
    free(buf);
    return 0;
}

static void release(Column *cols, Py_ssize_t ncols) {
    for (Py_ssize_t j = 0; j < ncols; j++)
        for (int b = 0; b < 3; b++)
            if (cols[j].held[b])
                PyBuffer_Release(&cols[j].views[b]);
}

/* Takes buffer `obj` (None: absent) into view b of c; fails unless it holds at least `need` bytes. */
static int take(Column *c, int b, PyObject *obj, Py_ssize_t need, Py_ssize_t j, const char *what,
                const unsigned char **ptr, Py_ssize_t *len) {
    *ptr = NULL;
    *len = 0;
    if (obj != Py_None) {
        if (PyObject_GetBuffer(obj, &c->views[b], PyBUF_SIMPLE) < 0)
            return -1;
        c->held[b] = 1;
        *ptr = c->views[b].buf;
        *len = c->views[b].len;
    }
    if (*len < need) {
        PyErr_Format(PyExc_ValueError, "key column %zd: its %s buffer holds %zd bytes, %zd needed", j, what,
                     *len, need);
        return -1;
    }
    return 0;
}

static int parse_column(PyObject *spec, Column *c, Py_ssize_t j, Py_ssize_t n) {
    PyObject *validity, *offsets, *data;
    int tag;
    if (!PyArg_ParseTuple(spec, "iinOOOn;a key column is (kind, tag, offset, validity, offsets, data, width)",
                          &c->kind, &tag, &c->offset, &validity, &offsets, &data, &c->width))
        return -1;
    c->tag = (unsigned char)tag;
    if (c->kind < BINARY32 || c->kind > NULLS ||
        (c->kind != NULLS && tag != 0 && tag != 's' && tag != 'y' && tag != 'i')) {
        PyErr_Format(PyExc_ValueError, "key column %zd: unknown kind %d or tag %d", j, c->kind, tag);
        return -1;
    }
    if (tag == 0 && c->kind != BINARY32 && c->kind != BINARY64) {
        PyErr_Format(PyExc_ValueError, "key column %zd: only a binary column may be pre-encoded", j);
        return -1;
    }
    if (c->offset < 0 || c->offset > PY_SSIZE_T_MAX / 16 - n) {
        PyErr_Format(PyExc_ValueError, "key column %zd: offset %zd out of range", j, c->offset);
        return -1;
    }
    Py_ssize_t end = c->offset + n, len;
    if (c->kind == NULLS)
        return 0;
    if (take(c, 0, validity, validity == Py_None ? 0 : (end + 7) / 8, j, "validity", &c->validity, &len) < 0)
        return -1;
    if (n == 0)
        c->validity = NULL;
    switch (c->kind) {
    case BINARY32:
    case BINARY64: {
        Py_ssize_t size = c->kind == BINARY32 ? 4 : 8;
        if (take(c, 1, offsets, n ? (end + 1) * size : 0, j, "offsets", &c->offsets, &len) < 0)
            return -1;
        if (take(c, 2, data, 0, j, "data", &c->data, &c->data_len) < 0)
            return -1;
        if (!c->data)
            c->data = (const unsigned char *)""; /* every value empty: no data buffer */
        return 0;
    }
    case FIXED:
    case INT:
    case UINT:
        if (c->width < 0 || c->width > PY_SSIZE_T_MAX / 16 / (end ? end : 1) ||
            (c->kind != FIXED && c->width != 1 && c->width != 2 && c->width != 4 && c->width != 8)) {
            PyErr_Format(PyExc_ValueError, "key column %zd: width %zd out of range", j, c->width);
            return -1;
        }
        return take(c, 2, data, n ? end * c->width : 0, j, "data", &c->data, &c->data_len);
    default: /* BOOL */
        return take(c, 2, data, n ? (end + 7) / 8 : 0, j, "data", &c->data, &c->data_len);
    }
}

static PyObject *key_groups(PyObject *self, PyObject *args) {
    (void)self;
    PyObject *out_obj, *columns;
    long long m;
    if (!PyArg_ParseTuple(args, "OLO:key_groups", &out_obj, &m, &columns))
        return NULL;
    if (m < 1 || m > ((long long)1 << 31)) {
        PyErr_SetString(PyExc_ValueError, "max_parallelism must be in 1..2**31");
        return NULL;
    }
    PyObject *seq = PySequence_Fast(columns, "columns must be a sequence");
    if (!seq)
        return NULL;
    Py_ssize_t ncols = PySequence_Fast_GET_SIZE(seq);
    if (ncols < 1) {
        Py_DECREF(seq);
        PyErr_SetString(PyExc_ValueError, "at least one key column is needed");
        return NULL;
    }
    Py_buffer out;
    if (PyObject_GetBuffer(out_obj, &out, PyBUF_WRITABLE) < 0) {
        Py_DECREF(seq);
        return NULL;
    }
    PyObject *result = NULL;
    Column *cols = NULL;
    if (out.len % 4) {
        PyErr_SetString(PyExc_ValueError, "out must hold whole int32 values");
        goto done;
    }
    Py_ssize_t n = out.len / 4;
    cols = calloc((size_t)ncols, sizeof(Column));
    if (!cols) {
        PyErr_NoMemory();
        goto done;
    }
    for (Py_ssize_t j = 0; j < ncols; j++)
        if (parse_column(PySequence_Fast_GET_ITEM(seq, j), &cols[j], j, n) < 0)
            goto done;
    int rc;
    Py_BEGIN_ALLOW_THREADS
    rc = hash_rows(cols, ncols, n, (uint32_t)m, (int32_t *)out.buf);
    Py_END_ALLOW_THREADS
    if (rc == -1)
        PyErr_SetString(PyExc_ValueError, "a key column's offsets lie outside its data");
    else if (rc == -2)
        PyErr_NoMemory();
    else
        result = Py_NewRef(Py_None);
done:
    if (cols) {
        release(cols, ncols);
        free(cols);
    }
    PyBuffer_Release(&out);
    Py_DECREF(seq);
    return result;
}

static PyMethodDef methods[] = {
    {"key_groups", key_groups, METH_VARARGS,
     "key_groups(out, max_parallelism, columns): the key group of every row of Arrow key columns, "
     "into out (n int32); see epochal.plan.column_keygroups."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_column_keygroups",
                                    "Key groups of Arrow key columns (epochal.plan.column_keygroups).", -1,
                                    methods, NULL, NULL, NULL, NULL};

PyMODINIT_FUNC PyInit__column_keygroups(void) {
    PyObject *mod = PyModule_Create(&module);
    if (!mod)
        return NULL;
    if (PyModule_AddIntConstant(mod, "BINARY32", BINARY32) < 0 || PyModule_AddIntConstant(mod, "BINARY64", BINARY64) < 0 ||
        PyModule_AddIntConstant(mod, "FIXED", FIXED) < 0 || PyModule_AddIntConstant(mod, "INT", INT) < 0 ||
        PyModule_AddIntConstant(mod, "UINT", UINT) < 0 || PyModule_AddIntConstant(mod, "BOOL", BOOL) < 0 ||
        PyModule_AddIntConstant(mod, "NULL", NULLS) < 0) {
        Py_DECREF(mod);
        return NULL;
    }
    return mod;
}
