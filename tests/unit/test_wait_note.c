/* Unit tests for worker/comm/wait_note and its use by worker/heartbeat: each kind of wait
 * reads as its phrase, an ended wait reads as nothing, and a heartbeat sent during a wait
 * names it after the phase (what daemon/monitor.c quotes when a peer freezes). */
#include <unistd.h>

#include "tests/unit/test.h"
#include "worker/comm/wait_note.h"
#include "worker/heartbeat.h"

static void test_wait_note_phrases(void)
{
    static const struct {
        enum wait_kind kind;
        enum comm_op op;
        int64_t a, b, bytes;
        const char *text;
    } cases[] = {
        {WAIT_BUCKET, COMM_OP_ALLREDUCE, 3, 7, 0, "allreduce bucket 3/7"},
        {WAIT_BUCKET, COMM_OP_REDUCE_SCATTER, 1, 2, 0, "reduce_scatter bucket 1/2"},
        {WAIT_PARAMS, COMM_OP_BROADCAST, 0, 0, 0, "broadcast params"},
        {WAIT_BUFFERS, COMM_OP_BROADCAST, 0, 0, 0, "broadcast buffers"},
        {WAIT_PLAN, COMM_OP_BROADCAST, 0, 0, 0, "broadcast fusion plan"},
        {WAIT_METRICS, COMM_OP_ALLREDUCE, 0, 0, 0, "allreduce metrics"},
        {WAIT_ITER, COMM_OP_ALL_GATHER, 4, 20, 65536,
         "all_gather of 65536 bytes, iteration 4/20"},
        {WAIT_ITER, COMM_OP_ALL_GATHER, 0, 20, 65536, "all_gather of 65536 bytes, warm-up"},
        {WAIT_BARRIER, COMM_OP_BARRIER, 0, 0, 0, "barrier"},
    };
    struct wait_note n = {0};
    char buf[96];
    wait_note_text(&n, buf, sizeof buf);
    T_EQ_STR(buf, "");
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        wait_note_begin(&n, cases[i].kind, cases[i].op, cases[i].a, cases[i].b, cases[i].bytes);
        wait_note_text(&n, buf, sizeof buf);
        T_EQ_STR(buf, cases[i].text);
    }
    wait_note_end(&n);
    wait_note_text(&n, buf, sizeof buf);
    T_EQ_STR(buf, "");
    wait_note_begin(NULL, WAIT_BARRIER, COMM_OP_BARRIER, 0, 0, 0); /* nothing reads it */
    wait_note_end(NULL);
}

/* The heartbeat's lines (a pipe stands in for the daemon): the phase alone, then the
 * phase and the wait while one lasts. */
static void test_wait_note_in_heartbeat(void)
{
    int fds[2];
    T_CHECK(pipe(fds) == 0);
    struct report_writer w;
    report_writer_init(&w, fds[1], 1);
    struct heartbeat hb;
    struct err e = {0};
    T_OK(heartbeat_start(&hb, &w, 50, &e));
    heartbeat_set_phase(&hb, "train repeat 0 step 41/100");
    wait_note_begin(&hb.note, WAIT_BUCKET, COMM_OP_ALLREDUCE, 3, 7, 0);
    usleep(200 * 1000); /* a few beats */
    wait_note_end(&hb.note);
    usleep(200 * 1000);
    heartbeat_stop(&hb);
    close(fds[1]);
    char text[16384];
    ssize_t n = read(fds[0], text, sizeof text - 1);
    close(fds[0]);
    report_writer_cleanup(&w);
    T_CHECK(n > 0);
    text[n] = '\0';
    const char *during = strstr(text,
                                "train repeat 0 step 41/100; waiting in allreduce bucket 3/7");
    T_CHECK_MSG(during, "%s", text);
    /* after the wait ended, the phase alone again */
    T_CHECK_MSG(strstr(during, "\"train repeat 0 step 41/100\""), "%s", text);
}

int main(int argc, char **argv)
{
    test_begin(argc, argv);
    TEST_RUN(test_wait_note_phrases);
    TEST_RUN(test_wait_note_in_heartbeat);
    return test_end();
}
