/* test_outbox: a follower's outbox and leader replies (daemon/outbox.h), and its spawn
 * check (follower_spawn_refusal): batches sized by encoded JSON, escapes included; a 413
 * halves the next batch down to one event, which is then handed back rather than sent
 * forever; the outbox capped by bytes; a reply past its cap cut with a named error; a
 * spawn beyond the node's slots refused naming the node (issue 31 defects 1 and 6). */
#include <jansson.h>
#include <stdio.h>
#include <string.h>

#include "daemon/follower.h"
#include "daemon/outbox.h"
#include "test.h"

/* A line event whose text is n control characters: each is 6 bytes once escaped. */
static json_t *ctl_line(int run, size_t n)
{
    char text[4096];
    memset(text, 0x01, n);
    text[n] = '\0';
    return json_pack("{s:i, s:i, s:s}", "run", run, "rank", 0, "line", text);
}

static void test_batches_count_escaped_bytes(void)
{
    struct outbox o;
    T_CHECK(outbox_init(&o, 10000, 1u << 20, 100));
    for (int i = 1; i <= 4; i++)
        T_CHECK(outbox_push(&o, ctl_line(i, 1000))); /* 1000 raw, over 6000 encoded */
    T_CHECK(o.bytes > 4 * 6000);
    size_t n = 0;
    json_t *b = outbox_batch(&o, &n);
    T_EQ_INT((int)n, 1); /* two would be over 12000 encoded bytes */
    T_CHECK(json_dumpb(b, NULL, 0, JSON_COMPACT) <= 10000 + 2);
    json_decref(b);
    outbox_accepted(&o, n);
    T_EQ_INT((int)outbox_count(&o), 3);
    outbox_free(&o);
}

static void test_413_splits_then_hands_back(void)
{
    struct outbox o;
    T_CHECK(outbox_init(&o, 1u << 20, 1u << 20, 100));
    for (int i = 1; i <= 4; i++)
        T_CHECK(outbox_push(&o, ctl_line(i, 100)));
    size_t n = 0;
    json_t *b = outbox_batch(&o, &n);
    json_decref(b);
    T_EQ_INT((int)n, 4);
    T_CHECK(outbox_refused_too_large(&o, n) == NULL); /* halved, nothing lost */
    b = outbox_batch(&o, &n);
    json_decref(b);
    T_EQ_INT((int)n, 2);
    T_CHECK(outbox_refused_too_large(&o, n) == NULL);
    b = outbox_batch(&o, &n);
    json_decref(b);
    T_EQ_INT((int)n, 1);
    json_t *ev = outbox_refused_too_large(&o, n); /* one alone: handed back, not resent */
    T_CHECK(ev != NULL);
    T_EQ_INT((int)json_integer_value(json_object_get(ev, "run")), 1);
    json_decref(ev);
    T_EQ_INT((int)outbox_count(&o), 3);
    outbox_accepted(&o, 0); /* accepted: the batch size is back */
    b = outbox_batch(&o, &n);
    json_decref(b);
    T_EQ_INT((int)n, 3);
    outbox_free(&o);
}

static void test_outbox_capped_by_bytes(void)
{
    struct outbox o;
    T_CHECK(outbox_init(&o, 1u << 20, 20000, 1000));
    int taken = 0;
    for (int i = 1; i <= 10; i++)
        taken += outbox_push(&o, ctl_line(i, 1000));
    T_EQ_INT(taken, 3); /* 6 KB each encoded */
    T_CHECK(o.bytes <= 20000);
    outbox_accepted(&o, 3);
    T_EQ_INT((int)o.bytes, 0);
    T_CHECK(outbox_push(&o, ctl_line(11, 1000)));
    outbox_clear(&o);
    T_EQ_INT((int)outbox_count(&o), 0);
    outbox_free(&o);
}

static void test_reply_capped(void)
{
    struct outbox_reply r = {.cap = 10};
    buf_init(&r.body);
    char chunk[6] = "abcdef";
    T_EQ_INT((int)outbox_reply_take(chunk, 1, 6, &r), 6);
    T_EQ_INT((int)outbox_reply_take(chunk, 1, 6, &r), 0); /* 12 > 10: the transfer stops */
    T_CHECK(r.over);
    T_EQ_INT((int)r.body.len, 6);
    buf_free(&r.body);
}

static void test_spawn_beyond_slots_refused(void)
{
    char why[200] = "";
    T_EQ_INT(follower_spawn_refusal("f1", 0, 4, 4, 1, why, sizeof why), 0);
    T_EQ_INT(follower_spawn_refusal("f1", 2, 4, 1, 2, why, sizeof why), 0);
    T_CHECK(follower_spawn_refusal("f1", 2, 4, 3, 1, why, sizeof why) < 0);
    T_CHECK_MSG(strstr(why, "node f1") && strstr(why, "--cpu-slots 4"), "%s", why);
    T_CHECK(follower_spawn_refusal("f1", 0, 4, 3, 2, why, sizeof why) < 0);
}

int main(int argc, char **argv)
{
    test_begin(argc, argv);
    TEST_RUN(test_batches_count_escaped_bytes);
    TEST_RUN(test_413_splits_then_hands_back);
    TEST_RUN(test_outbox_capped_by_bytes);
    TEST_RUN(test_reply_capped);
    TEST_RUN(test_spawn_beyond_slots_refused);
    return test_end();
}
