/* The reply on stdout, streamed. On a terminal, the control characters a model produced (ESC
 * and the other C0 controls but \n and \t, and DEL) are shown as \xNN: sent raw they could move
 * the cursor, rewrite earlier lines or change the terminal's state, and a model's output is no
 * more trusted than a file's. Piped or redirected, the bytes go out as they are, so the output
 * equals the JSON's text. */
#include "gen.h"

#include <unistd.h>

static bool shown_escaped(unsigned char c) { return (c < 0x20 && c != '\n' && c != '\t') || c == 0x7F; }

void gen_stdout_emit(void *ctx, const char *text, size_t n) {
    (void)ctx;
    static int tty = -1;
    if (tty < 0) tty = isatty(STDOUT_FILENO);
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
