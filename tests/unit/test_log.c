/* Unit tests for common/log: a line is one line whatever the message holds. Control
 * characters in a user's string (a "\n" that would start a forged line, an "\x1b[" that
 * would move the terminal, a tab, DEL) come out as \xNN, UTF-8 bytes as they are, and a
 * message longer than a line is cut, still ending in its one newline. */
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "common/log.h"
#include "tests/unit/test.h"

/* What one log_info of "%s" with s writes to stderr (stderr sent to a file meanwhile). */
static size_t test_log_capture(const char *s, char *out, size_t cap)
{
    char path[256];
    test_tmp_path(path, sizeof path, "stderr");
    int fd = open(path, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    int saved = dup(STDERR_FILENO);
    if (fd < 0 || saved < 0)
        return 0;
    dup2(fd, STDERR_FILENO);
    log_info("spec path %s", s);
    dup2(saved, STDERR_FILENO);
    close(saved);
    ssize_t n = pread(fd, out, cap - 1, 0);
    close(fd);
    out[n > 0 ? n : 0] = '\0';
    return n > 0 ? (size_t)n : 0;
}

static size_t test_log_count(const char *s, char c)
{
    size_t n = 0;
    for (; *s; s++)
        n += *s == c;
    return n;
}

static void test_log_escapes_control_characters(void)
{
    char got[2048];
    size_t n = test_log_capture("/data/x\n12:00:00.000 E ddpbenchd fake.c:1 forged\x1b[2J\t\x7f"
                                "caf\xc3\xa9",
                                got, sizeof got);
    T_CHECK(n > 0);
    T_EQ_INT(test_log_count(got, '\n'), 1);
    T_CHECK(got[n - 1] == '\n');
    T_CHECK_MSG(strchr(got, '\x1b') == NULL && strchr(got, '\t') == NULL &&
                    strchr(got, '\x7f') == NULL,
                "%s", got);
    T_CHECK_MSG(strstr(got, "spec path /data/x\\x0a12:00:00.000 E ddpbenchd fake.c:1 "
                            "forged\\x1b[2J\\x09\\x7fcaf\xc3\xa9\n"),
                "%s", got);
}

static void test_log_long_message_is_one_line(void)
{
    static char big[4096];
    for (size_t i = 0; i < sizeof big - 1; i++)
        big[i] = i % 3 ? 'a' : '\n'; /* grows four-fold when escaped */
    char got[8192];
    size_t n = test_log_capture(big, got, sizeof got);
    T_CHECK(n > 0 && n <= 1024);
    T_EQ_INT(test_log_count(got, '\n'), 1);
    T_CHECK(got[n - 1] == '\n');
    /* cut between escapes, never inside one */
    const char *last = strrchr(got, '\\');
    T_CHECK(last && (size_t)(got + n - 1 - last) >= 4);
}

int main(int argc, char **argv)
{
    test_begin(argc, argv);
    TEST_RUN(test_log_escapes_control_characters);
    TEST_RUN(test_log_long_message_is_one_line);
    return test_end();
}
