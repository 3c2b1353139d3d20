/* A DeepSeek V4 thinking reply is its reasoning, "</think>", then the answer. The server hands
 * them out as OpenAI's reasoning_content and content (docs/serve.md); while the reply is still
 * coming, a tail that may be the start of the marker is held back, so a marker split across
 * steps never leaks into the reasoning. */
#include "gen.h"

#include <string.h>

void gen_think_split(const char *text, size_t n, bool done, gen_think *out) {
    static const char mark[] = GEN_THINK_END;
    const size_t m = sizeof mark - 1;
    for (size_t i = 0; i + m <= n; i++)
        if (text[i] == '<' && !memcmp(text + i, mark, m)) {
            out->found = true;
            out->reasoning = i;
            out->answer = i + m;
            return;
        }
    out->found = false;
    out->answer = n;
    out->reasoning = n;
    if (done) return;
    /* the longest tail that is a proper prefix of the marker */
    for (size_t k = m - 1; k > 0; k--)
        if (k <= n && !memcmp(text + n - k, mark, k)) {
            out->reasoning = n - k;
            return;
        }
}
