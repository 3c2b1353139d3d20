/* The reply on stdout, streamed. On a terminal, the control characters a model produced (ESC
 * and the other C0 controls but \n and \t, and DEL) are shown as \xNN: sent raw they could move
 * the cursor, rewrite earlier lines or change the terminal's state, and a model's output is no
 * more trusted than a file's. Piped or redirected, the bytes go out as they are, so the output
 * equals the JSON's text. Over ranks, rank 0's stdout is a pipe to mpirun, which writes to the
 * launcher's: the launcher's terminal decides (gen_set_tty). */
#include "gen.h"

#include <unistd.h>

static int g_tty_in = -1, g_tty_out = -1; /* -1: not known yet (isatty, once) */

void gen_set_tty(bool in, bool out) {
    g_tty_in = in;
    g_tty_out = out;
}

bool gen_stdin_is_tty(void) {
    if (g_tty_in < 0) g_tty_in = isatty(STDIN_FILENO) == 1;
    return g_tty_in;
}

bool gen_stdout_is_tty(void) {
    if (g_tty_out < 0) g_tty_out = isatty(STDOUT_FILENO) == 1;
    return g_tty_out;
}

static bool shown_escaped(unsigned char c) { return (c < 0x20 && c != '\n' && c != '\t') || c == 0x7F; }

void gen_stdout_emit(void *ctx, const char *text, size_t n) {
    (void)ctx;
    const bool tty = gen_stdout_is_tty();
    size_t done = 0;
    for (size_t i = 0; tty && i < n; i++) {
        if (!shown_escaped((unsigned char)text[i])) continue;
        fwrite(text + done, 1, i - done, stdout);
        fprintf(stdout, "\\x%02x", (unsigned char)text[i]);
        done = i + 1;
    }
    fwrite(text + done, 1, n - done, stdout);
    fflush(stdout); /* each piece as soon as it is final */
}
