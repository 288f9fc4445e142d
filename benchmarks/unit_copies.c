/*
 * The streamer's per-unit CUDA calls made from C, for benchmarks/unit_issue_probe.py
 * (issue 11): how much of a unit's host time a compiled op would take off.
 *
 * No CUDA headers and no link to libcudart: the caller passes the addresses of
 * cudart's functions (from the libcudart vLLM's ctypes wrapper has loaded), so this
 * builds with any C compiler:  cc -O2 -shared -fPIC -pthread -o unit_copies.so unit_copies.c
 *
 * - uc_enter: a unit's entry in one call: the compute stream's wait for the unit's copy,
 *   then the copy stream's wait for the next slot's release, the next copy and its record.
 * - uc_start / uc_push / uc_stop: a copy thread of its own (no GIL): the caller pushes
 *   each copy (its stream, the slot's release to wait for, the copy, the event to record)
 *   and the thread issues the three calls; uc_issued_count counts the copies issued, which
 *   the caller checks before its wait for a copy. The thread spins up to uc_set_spin's
 *   nanoseconds for the next copy, then sleeps on a condition variable.
 */
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <time.h>

typedef int (*wait_fn)(void *stream, void *event, unsigned flags);
typedef int (*memcpy_fn)(void *dst, const void *src, size_t nbytes, int kind, void *stream);
typedef int (*record_fn)(void *event, void *stream);

enum { MEMCPY_DEFAULT = 4, CAPACITY = 1024 };

static wait_fn cuda_wait;
static memcpy_fn cuda_memcpy;
static record_fn cuda_record;

void uc_init(void *wait, void *memcpy, void *record) {
    cuda_wait = (wait_fn)wait;
    cuda_memcpy = (memcpy_fn)memcpy;
    cuda_record = (record_fn)record;
}

int uc_enter(void *compute, void *copied, void *copy, void *released_next, void *dst,
             const void *src, size_t nbytes, void *copied_next) {
    int error = cuda_wait(compute, copied, 0);
    if (error || !dst) return error;
    return cuda_wait(copy, released_next, 0) ||
           cuda_memcpy(dst, src, nbytes, MEMCPY_DEFAULT, copy) ||
           cuda_record(copied_next, copy);
}

struct copy_request {
    void *stream, *after, *dst, *done;
    const void *src;
    size_t nbytes;
};

static struct copy_request requests[CAPACITY];
static _Atomic long spin_ns;
static _Atomic long pushed;
_Atomic long uc_issued_count; /* read by the caller as a plain long */
static _Atomic int first_error;
static _Atomic int sleeping;
static _Atomic int stopping;
static pthread_t thread;
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t wake = PTHREAD_COND_INITIALIZER;

static long now_ns(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1000000000L + t.tv_nsec;
}

static void *serve(void *unused) {
    (void)unused;
    for (;;) {
        long next = atomic_load(&uc_issued_count);
        long deadline = now_ns() + atomic_load(&spin_ns);
        while (atomic_load(&pushed) == next && !atomic_load(&stopping) && now_ns() < deadline)
            ;
        if (atomic_load(&pushed) == next) {
            pthread_mutex_lock(&lock);
            atomic_store(&sleeping, 1);
            while (atomic_load(&pushed) == next && !atomic_load(&stopping))
                pthread_cond_wait(&wake, &lock);
            atomic_store(&sleeping, 0);
            pthread_mutex_unlock(&lock);
        }
        if (atomic_load(&pushed) == next) return NULL; /* stopping, nothing left */
        struct copy_request *r = &requests[next % CAPACITY];
        int error = cuda_wait(r->stream, r->after, 0) ||
                    cuda_memcpy(r->dst, r->src, r->nbytes, MEMCPY_DEFAULT, r->stream) ||
                    cuda_record(r->done, r->stream);
        if (error) {
            int none = 0;
            atomic_compare_exchange_strong(&first_error, &none, error);
        }
        atomic_store(&uc_issued_count, next + 1);
    }
}

int uc_start(void) {
    atomic_store(&stopping, 0);
    return pthread_create(&thread, NULL, serve, NULL);
}

/* Queue a copy; the caller keeps fewer than CAPACITY copies unissued (a ring's lookahead). */
long uc_push(void *stream, void *after, void *dst, const void *src, size_t nbytes, void *done) {
    long at = atomic_load(&pushed);
    requests[at % CAPACITY] = (struct copy_request){stream, after, dst, done, src, nbytes};
    atomic_store(&pushed, at + 1);
    if (atomic_load(&sleeping)) {
        pthread_mutex_lock(&lock);
        pthread_cond_signal(&wake);
        pthread_mutex_unlock(&lock);
    }
    return at;
}

/* How long the thread spins for the next copy before it sleeps. */
void uc_set_spin(long ns) { atomic_store(&spin_ns, ns); }

long uc_issued(void) { return atomic_load(&uc_issued_count); }

/* Wait (spinning, yielding) until `count` copies are issued; the first error, or 0. */
int uc_wait_issued(long count) {
    while (atomic_load(&uc_issued_count) < count && !atomic_load(&first_error)) sched_yield();
    return atomic_load(&first_error);
}

void uc_stop(void) {
    atomic_store(&stopping, 1);
    pthread_mutex_lock(&lock);
    pthread_cond_signal(&wake);
    pthread_mutex_unlock(&lock);
    pthread_join(thread, NULL);
}
