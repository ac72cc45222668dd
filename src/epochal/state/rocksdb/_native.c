/* epochal.state.rocksdb._native: the canonical savepoint of a RocksDB subtask written without a
 * Python object per entry (issue 34; see epochal/state/rocksdb/native.py for the contract).
 *
 * It calls RocksDB's C API (include/rocksdb/c.h, a stable interface) in a shared library that
 * the Python side finds and hands over by path: the RocksDB library inside the rocksdbjni JAR
 * that PySpark ships, which exports the whole C API. The few functions used are declared here
 * with opaque pointers, so no RocksDB header is needed to build this file.
 *
 * Reader(directory, lower, upper) opens the RocksDB checkpoint at `directory` read-only (nothing
 * may write to it meanwhile); reader.read(min_bytes) returns the next key groups of the keys in
 * [lower, upper) of every column family as (data, spans): `data` the concatenation of one pickle
 * per key group, each loadable by pickle.loads as {column family name: (key bytes without the
 * 2-byte group prefix, value bytes)} (two lists of equal length, in key order; column families
 * without entries in the group left out; groups without entries left out), `spans` the list of
 * (group, offset in data, length) of each pickle, in group order; whole groups, at least
 * min_bytes of them unless the range ends (then b"" and []). The interpreter lock is released
 * while RocksDB is read. One thread at a time per Reader. The pickles' CRCs are the caller's
 * (epochal.state.checksums, a maintained library: nothing here computes one).
 *
 * `data` is a Chunk: a read-only buffer (the buffer protocol, len()) that owns the memory the
 * reader filled, handed over without a copy; once the last reference to it goes, its memory is
 * kept for the next read (at most POOL buffers, while any Reader is open), so a savepoint's reads
 * neither copy each chunk into a bytes object nor fault in fresh pages for every one. Each state's
 * values are written as they are read and its keys gathered aside (the values are most of the
 * bytes): the values list is built first and set aside in the pickle's memo, then the keys list,
 * and the pair is (keys, values) as pickle.loads builds it. */

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <dlfcn.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

typedef void rdb_t;

static struct {
    int loaded;
    rdb_t *(*options_create)(void);
    void (*options_destroy)(rdb_t *);
    char **(*list_column_families)(const rdb_t *, const char *, size_t *, char **);
    void (*list_column_families_destroy)(char **, size_t);
    rdb_t *(*open_for_read_only_column_families)(const rdb_t *, const char *, int, const char *const *,
                                                  const rdb_t *const *, rdb_t **, unsigned char, char **);
    void (*column_family_handle_destroy)(rdb_t *);
    void (*close)(rdb_t *);
    rdb_t *(*readoptions_create)(void);
    void (*readoptions_destroy)(rdb_t *);
    void (*readoptions_set_fill_cache)(rdb_t *, unsigned char);
    void (*readoptions_set_readahead_size)(rdb_t *, size_t);
    void (*readoptions_set_iterate_upper_bound)(rdb_t *, const char *, size_t);
    rdb_t *(*create_iterator_cf)(rdb_t *, const rdb_t *, rdb_t *);
    void (*iter_destroy)(rdb_t *);
    void (*iter_seek)(rdb_t *, const char *, size_t);
    unsigned char (*iter_valid)(const rdb_t *);
    void (*iter_next)(rdb_t *);
    const char *(*iter_key)(const rdb_t *, size_t *);
    const char *(*iter_value)(const rdb_t *, size_t *);
    void (*iter_get_error)(const rdb_t *, char **);
    void (*free)(void *);
    void (*options_set_allow_mmap_reads)(rdb_t *, unsigned char);
    void (*set_perf_level)(int); /* optional */
} api;

#define READAHEAD (4u << 20)

static PyObject *load(PyObject *self, PyObject *args) {
    const char *path;
    if (!PyArg_ParseTuple(args, "s", &path))
        return NULL;
    void *lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (lib == NULL) {
        PyErr_Format(PyExc_OSError, "cannot load the RocksDB library %s: %s", path, dlerror());
        return NULL;
    }
#define SYMBOL(field, name)                                                                         \
    do {                                                                                            \
        *(void **)(&api.field) = dlsym(lib, name);                                                  \
        if (api.field == NULL) {                                                                    \
            PyErr_Format(PyExc_OSError, "the library %s has no %s: not RocksDB's C API", path, name); \
            return NULL;                                                                            \
        }                                                                                           \
    } while (0)
    SYMBOL(options_create, "rocksdb_options_create");
    SYMBOL(options_destroy, "rocksdb_options_destroy");
    SYMBOL(list_column_families, "rocksdb_list_column_families");
    SYMBOL(list_column_families_destroy, "rocksdb_list_column_families_destroy");
    SYMBOL(open_for_read_only_column_families, "rocksdb_open_for_read_only_column_families");
    SYMBOL(column_family_handle_destroy, "rocksdb_column_family_handle_destroy");
    SYMBOL(close, "rocksdb_close");
    SYMBOL(readoptions_create, "rocksdb_readoptions_create");
    SYMBOL(readoptions_destroy, "rocksdb_readoptions_destroy");
    SYMBOL(readoptions_set_fill_cache, "rocksdb_readoptions_set_fill_cache");
    SYMBOL(readoptions_set_readahead_size, "rocksdb_readoptions_set_readahead_size");
    SYMBOL(readoptions_set_iterate_upper_bound, "rocksdb_readoptions_set_iterate_upper_bound");
    SYMBOL(create_iterator_cf, "rocksdb_create_iterator_cf");
    SYMBOL(iter_destroy, "rocksdb_iter_destroy");
    SYMBOL(iter_seek, "rocksdb_iter_seek");
    SYMBOL(iter_valid, "rocksdb_iter_valid");
    SYMBOL(iter_next, "rocksdb_iter_next");
    SYMBOL(iter_key, "rocksdb_iter_key");
    SYMBOL(iter_value, "rocksdb_iter_value");
    SYMBOL(iter_get_error, "rocksdb_iter_get_error");
    SYMBOL(free, "rocksdb_free");
    SYMBOL(options_set_allow_mmap_reads, "rocksdb_options_set_allow_mmap_reads");
#undef SYMBOL
    *(void **)(&api.set_perf_level) = dlsym(lib, "rocksdb_set_perf_level");
    api.loaded = 1;
    Py_RETURN_NONE;
}

/* A growing byte buffer. */
typedef struct {
    char *data;
    size_t len, cap;
} buf_t;

static int reserve(buf_t *b, size_t extra) {
    if (b->len + extra <= b->cap)
        return 0;
    size_t cap = b->cap ? b->cap : (size_t)1 << 16;
    while (cap < b->len + extra)
        cap *= 2;
    char *data = realloc(b->data, cap);
    if (data == NULL)
        return -1;
    b->data = data;
    b->cap = cap;
    return 0;
}

static int put(buf_t *b, const void *p, size_t n) {
    if (reserve(b, n))
        return -1;
    memcpy(b->data + b->len, p, n);
    b->len += n;
    return 0;
}

/* A little-endian length after a pickle opcode. */
static int put_length(buf_t *b, char opcode, uint64_t n, int width) {
    unsigned char head[9];
    head[0] = (unsigned char)opcode;
    for (int i = 0; i < width; i++)
        head[1 + i] = (unsigned char)(n >> (8 * i));
    return put(b, head, 1 + (size_t)width);
}

/* A bytes object: SHORT_BINBYTES, BINBYTES or BINBYTES8 (pickle protocols 3 and 4). */
static int put_bytes(buf_t *b, const char *p, size_t n) {
    int failed = n < 256 ? put_length(b, 'C', n, 1) : n <= 0xffffffffu ? put_length(b, 'B', n, 4)
                                                                        : put_length(b, '\x8e', n, 8);
    return failed || put(b, p, n);
}

/* A str from UTF-8: SHORT_BINUNICODE or BINUNICODE (the column family's name). */
static int put_str(buf_t *b, const char *p, size_t n) {
    int failed = n < 256 ? put_length(b, '\x8c', n, 1) : put_length(b, 'X', n, 4);
    return failed || put(b, p, n);
}

/* Chunk buffers kept for the next read (under the interpreter lock): at most POOL, and only while
 * some Reader is open (the last one to close frees them). */
#define POOL 4
static struct {
    char *data[POOL];
    size_t cap[POOL];
    int n, readers;
} pool;

static void pool_put(char *data, size_t cap) {
    if (pool.readers > 0 && pool.n < POOL) {
        pool.data[pool.n] = data;
        pool.cap[pool.n++] = cap;
    } else {
        free(data);
    }
}

static void pool_take(buf_t *b) {
    if (b->data == NULL && pool.n > 0) {
        pool.n--;
        b->data = pool.data[pool.n];
        b->cap = pool.cap[pool.n];
        b->len = 0;
    }
}

/* A chunk the reader filled, handed to Python without a copy: a read-only buffer that owns its
 * memory and gives it back to the pool when it goes. */
typedef struct {
    PyObject_HEAD
    char *data;
    Py_ssize_t len;
    size_t cap;
} Chunk;

static int Chunk_getbuffer(Chunk *c, Py_buffer *view, int flags) {
    return PyBuffer_FillInfo(view, (PyObject *)c, c->data, c->len, 1, flags);
}

static void Chunk_dealloc(Chunk *c) {
    if (c->data != NULL)
        pool_put(c->data, c->cap);
    Py_TYPE(c)->tp_free((PyObject *)c);
}

static Py_ssize_t Chunk_length(Chunk *c) { return c->len; }

static PyBufferProcs chunk_buffer = {.bf_getbuffer = (getbufferproc)Chunk_getbuffer};
static PySequenceMethods chunk_sequence = {.sq_length = (lenfunc)Chunk_length};

static PyTypeObject ChunkType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "epochal.state.rocksdb._native.Chunk",
    .tp_basicsize = sizeof(Chunk),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "A chunk of key-group pickles read by a Reader: a read-only buffer (memoryview(chunk)).",
    .tp_dealloc = (destructor)Chunk_dealloc,
    .tp_as_buffer = &chunk_buffer,
    .tp_as_sequence = &chunk_sequence,
};

typedef struct {
    rdb_t *iter;
    int group; /* of the current key, -1 once exhausted */
} cursor_t;

static const char *advance(cursor_t *c) {
    if (!api.iter_valid(c->iter)) {
        c->group = -1;
        return NULL;
    }
    size_t n;
    const char *key = api.iter_key(c->iter, &n);
    if (n < 2)
        return "a key shorter than its 2-byte key group";
    c->group = ((unsigned char)key[0] << 8) | (unsigned char)key[1];
    return NULL;
}

/* A reader of one checkpoint: the database open read-only, one cursor per column family. */
typedef struct {
    PyObject_HEAD
    size_t ncf;
    char **names;
    rdb_t *options, *db, *ro, **handles;
    const rdb_t **cf_options;
    cursor_t *cursors;
    buf_t data, keys; /* the chunk; one state's keys in a group, gathered aside */
    int64_t *spans; /* group, offset, length */
    size_t nspans, capspans;
    char *error;    /* RocksDB's (rocksdb_free) */
    const char *message;
    int busy;       /* a read() is running in some thread */
    int counted;    /* open, counted in pool.readers */
    char *upper;    /* the read options point at it (RocksDB's C API does not copy it) */
} Reader;

static void release(Reader *r) {
    if (r->counted) { /* the last open Reader frees the pool (the interpreter lock is held here) */
        r->counted = 0;
        if (--pool.readers == 0)
            while (pool.n > 0)
                free(pool.data[--pool.n]);
    }
    if (r->cursors != NULL)
        for (size_t i = 0; i < r->ncf; i++)
            if (r->cursors[i].iter != NULL)
                api.iter_destroy(r->cursors[i].iter);
    if (r->ro != NULL)
        api.readoptions_destroy(r->ro);
    if (r->handles != NULL)
        for (size_t i = 0; i < r->ncf; i++)
            if (r->handles[i] != NULL)
                api.column_family_handle_destroy(r->handles[i]);
    if (r->db != NULL)
        api.close(r->db);
    if (r->names != NULL)
        api.list_column_families_destroy(r->names, r->ncf);
    if (r->options != NULL)
        api.options_destroy(r->options);
    free(r->handles);
    free(r->cursors);
    free(r->cf_options);
    free(r->data.data);
    free(r->keys.data);
    free(r->spans);
    free(r->upper);
    r->upper = NULL;
    r->cursors = NULL, r->ro = NULL, r->handles = NULL, r->db = NULL, r->names = NULL, r->options = NULL;
    r->cf_options = NULL, r->data.data = NULL, r->keys.data = NULL, r->spans = NULL;
    r->ncf = 0;
}

/* Open the checkpoint and seek every cursor to `lower`, without the interpreter lock. */
static int open_all(Reader *r, const char *directory, const char *lower, size_t lower_n, const char *upper,
                    size_t upper_n) {
    r->options = api.options_create();
    /* the SST files mapped, not read into buffers: blocks are parsed where they lie (about 10 %
     * less CPU for a whole-database read; the files are a checkpoint's, never changed) */
    api.options_set_allow_mmap_reads(r->options, 1);
    r->names = api.list_column_families(r->options, directory, &r->ncf, &r->error);
    if (r->error != NULL)
        return -1;
    r->handles = calloc(r->ncf, sizeof(*r->handles));
    r->cursors = calloc(r->ncf, sizeof(*r->cursors));
    r->cf_options = calloc(r->ncf, sizeof(*r->cf_options));
    if (r->handles == NULL || r->cursors == NULL || r->cf_options == NULL) {
        r->message = "out of memory";
        return -1;
    }
    for (size_t i = 0; i < r->ncf; i++)
        r->cf_options[i] = r->options;
    r->db = api.open_for_read_only_column_families(r->options, directory, (int)r->ncf, (const char *const *)r->names,
                                                   r->cf_options, r->handles, 0, &r->error);
    if (r->error != NULL)
        return -1;
    r->ro = api.readoptions_create();
    api.readoptions_set_fill_cache(r->ro, 0);
    api.readoptions_set_readahead_size(r->ro, READAHEAD);
    if ((r->upper = malloc(upper_n ? upper_n : 1)) == NULL) {
        r->message = "out of memory";
        return -1;
    }
    memcpy(r->upper, upper, upper_n);
    api.readoptions_set_iterate_upper_bound(r->ro, r->upper, upper_n);
    for (size_t i = 0; i < r->ncf; i++) {
        r->cursors[i].iter = api.create_iterator_cf(r->db, r->ro, r->handles[i]);
        api.iter_seek(r->cursors[i].iter, lower, lower_n);
        if ((r->message = advance(&r->cursors[i])) != NULL)
            return -1;
    }
    return 0;
}

/* The next groups into r->data (one pickle each, spans in r->spans) until it holds at least
 * `min_bytes` or the range ends, without the interpreter lock. Returns 0, or -1 with error or
 * message set. */
static int read_chunk(Reader *r, size_t min_bytes) {
    buf_t *d = &r->data;
    d->len = 0;
    r->nspans = 0;
    if (api.set_perf_level != NULL)
        api.set_perf_level(1); /* kDisable, for this thread: no perf counters per entry */
    while (d->len < min_bytes) {
        int group = -1;
        for (size_t i = 0; i < r->ncf; i++)
            if (r->cursors[i].group >= 0 && (group < 0 || r->cursors[i].group < group))
                group = r->cursors[i].group;
        if (group < 0) { /* every cursor at its end, or stopped by an error */
            for (size_t i = 0; i < r->ncf; i++) {
                api.iter_get_error(r->cursors[i].iter, &r->error);
                if (r->error != NULL)
                    return -1;
            }
            break;
        }
        size_t start = d->len;
        if (put(d, "\x80\x04}(", 4)) /* PROTO 4, EMPTY_DICT, MARK */
            goto oom;
        unsigned int memo = 0; /* the pickle's memo: one values list per state so far */
        for (size_t i = 0; i < r->ncf; i++) {
            cursor_t *c = &r->cursors[i];
            if (c->group != group)
                continue;
            r->keys.len = 0;
            if (put_str(d, r->names[i], strlen(r->names[i])) || put(d, "](", 2)) /* EMPTY_LIST, MARK */
                goto oom;
            while (c->group == group) {
                size_t kn, vn;
                const char *key = api.iter_key(c->iter, &kn);
                const char *value = api.iter_value(c->iter, &vn);
                if (put_bytes(&r->keys, key + 2, kn - 2) || put_bytes(d, value, vn))
                    goto oom;
                api.iter_next(c->iter);
                if ((r->message = advance(c)) != NULL)
                    return -1;
            }
            api.iter_get_error(c->iter, &r->error);
            if (r->error != NULL)
                return -1;
            /* APPENDS, MEMOIZE, POP (the values set aside); EMPTY_LIST, MARK, the keys, APPENDS;
             * BINGET or LONG_BINGET of the values; TUPLE2 */
            if (put(d, "e\x94" "0](", 5) || put(d, r->keys.data, r->keys.len) || put(d, "e", 1) ||
                (memo < 256 ? put_length(d, 'h', memo, 1) : put_length(d, 'j', memo, 4)) || put(d, "\x86", 1))
                goto oom;
            memo++;
        }
        if (put(d, "u.", 2)) /* SETITEMS, STOP */
            goto oom;
        if (r->nspans + 3 > r->capspans) {
            size_t cap = r->capspans ? r->capspans * 2 : 3 * 64;
            int64_t *spans = realloc(r->spans, cap * sizeof(*spans));
            if (spans == NULL)
                goto oom;
            r->spans = spans;
            r->capspans = cap;
        }
        r->spans[r->nspans++] = group;
        r->spans[r->nspans++] = (int64_t)start;
        r->spans[r->nspans++] = (int64_t)(d->len - start);
    }
    return 0;
oom:
    r->message = "out of memory";
    return -1;
}

/* Raise OSError "<what>[ <directory>]: <RocksDB's error or our message>" and release the reader. */
static PyObject *fail(Reader *r, const char *what, const char *directory) {
    PyErr_Format(PyExc_OSError, "%s%s%s: %s", what, directory != NULL ? " " : "", directory != NULL ? directory : "",
                 r->error != NULL ? r->error : r->message);
    if (r->error != NULL)
        api.free(r->error);
    r->error = NULL;
    r->message = NULL;
    release(r);
    return NULL;
}

static int Reader_init(Reader *r, PyObject *args, PyObject *kwargs) {
    const char *directory, *lower, *upper;
    Py_ssize_t lower_n, upper_n;
    static char *keywords[] = {"directory", "lower", "upper", NULL};
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "sy#y#", keywords, &directory, &lower, &lower_n, &upper, &upper_n))
        return -1;
    if (!api.loaded) {
        PyErr_SetString(PyExc_RuntimeError, "no RocksDB library loaded (load() first)");
        return -1;
    }
    if (r->busy || r->db != NULL || r->options != NULL) {
        PyErr_SetString(PyExc_RuntimeError, "a Reader is opened once");
        return -1;
    }
    int status;
    r->busy = 1;
    Py_BEGIN_ALLOW_THREADS
    status = open_all(r, directory, lower, (size_t)lower_n, upper, (size_t)upper_n);
    Py_END_ALLOW_THREADS
    r->busy = 0;
    if (status != 0) {
        fail(r, "opening the RocksDB checkpoint", directory);
        return -1;
    }
    r->counted = 1;
    pool.readers++;
    return 0;
}

static PyObject *Reader_read(Reader *r, PyObject *args) {
    Py_ssize_t min_bytes;
    if (!PyArg_ParseTuple(args, "n", &min_bytes))
        return NULL;
    if (r->busy) {
        PyErr_SetString(PyExc_RuntimeError, "Reader.read() is running in another thread");
        return NULL;
    }
    if (r->db == NULL)
        return Py_BuildValue("(y#[])", "", (Py_ssize_t)0); /* closed, failed or never opened: nothing */
    int status;
    pool_take(&r->data);
    r->busy = 1;
    Py_BEGIN_ALLOW_THREADS
    status = read_chunk(r, min_bytes > 0 ? (size_t)min_bytes : 1);
    Py_END_ALLOW_THREADS
    r->busy = 0;
    if (status != 0)
        return fail(r, "reading the RocksDB checkpoint", NULL);
    if (r->nspans == 0) /* the range has ended */
        return Py_BuildValue("(y#[])", "", (Py_ssize_t)0);
    Chunk *data = PyObject_New(Chunk, &ChunkType);
    if (data != NULL) { /* the chunk takes the buffer; the next read takes one from the pool or grows its own */
        data->data = r->data.data;
        data->len = (Py_ssize_t)r->data.len;
        data->cap = r->data.cap;
        r->data.data = NULL;
        r->data.len = r->data.cap = 0;
    }
    PyObject *spans = PyList_New((Py_ssize_t)(r->nspans / 3));
    PyObject *out = NULL;
    if (data != NULL && spans != NULL) {
        int failed = 0;
        for (size_t i = 0; i < r->nspans / 3 && !failed; i++) {
            int64_t *span_of = r->spans + 3 * i;
            PyObject *span = Py_BuildValue("(LLL)", (long long)span_of[0], (long long)span_of[1],
                                           (long long)span_of[2]);
            failed = span == NULL;
            if (!failed)
                PyList_SET_ITEM(spans, (Py_ssize_t)i, span);
        }
        if (!failed)
            out = PyTuple_Pack(2, (PyObject *)data, spans);
    }
    Py_XDECREF(data);
    Py_XDECREF(spans);
    return out;
}

static PyObject *Reader_close(Reader *r, PyObject *unused) {
    if (r->busy) {
        PyErr_SetString(PyExc_RuntimeError, "Reader.read() is running in another thread");
        return NULL;
    }
    release(r);
    Py_RETURN_NONE;
}

static void Reader_dealloc(Reader *r) {
    release(r);
    Py_TYPE(r)->tp_free((PyObject *)r);
}

static PyMethodDef reader_methods[] = {
    {"read", (PyCFunction)Reader_read, METH_VARARGS,
     "read(min_bytes) -> (data, [(group, offset, length)]): the next groups, at least min_bytes of them "
     "unless the range ends (then b'' and [] for ever after). The interpreter lock is released meanwhile."},
    {"close", (PyCFunction)Reader_close, METH_NOARGS, "close(): release the database (also on garbage collection)."},
    {NULL, NULL, 0, NULL},
};

static PyTypeObject ReaderType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "epochal.state.rocksdb._native.Reader",
    .tp_basicsize = sizeof(Reader),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "Reader(directory, lower, upper): the keys in [lower, upper) of the RocksDB checkpoint at "
              "directory (opened read-only), in key-group pickles (see the module's source).",
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)Reader_init,
    .tp_dealloc = (destructor)Reader_dealloc,
    .tp_methods = reader_methods,
};

static PyMethodDef methods[] = {
    {"load", load, METH_VARARGS, "load(path): use the RocksDB C API of the shared library at path."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_native", NULL, -1, methods, NULL, NULL, NULL, NULL};

PyMODINIT_FUNC PyInit__native(void) {
    if (PyType_Ready(&ReaderType) < 0 || PyType_Ready(&ChunkType) < 0)
        return NULL;
    PyObject *m = PyModule_Create(&module);
    if (m == NULL)
        return NULL;
    Py_INCREF(&ReaderType);
    if (PyModule_AddObject(m, "Reader", (PyObject *)&ReaderType) < 0) {
        Py_DECREF(&ReaderType);
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
