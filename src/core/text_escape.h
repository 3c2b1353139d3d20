/* Escaping bytes that came from a file (tensor names, config keys, dtype strings) before they go
 * into an error message: a message ends up on a terminal, where raw control bytes could move the
 * cursor, rewrite earlier lines or change the terminal's state. Not installed. */
#ifndef TILESTACK_TEXT_ESCAPE_H
#define TILESTACK_TEXT_ESCAPE_H

#include <stddef.h>

/* Room for one escaped name in a message: long enough for every legitimate tensor name or key,
 * short enough that a hostile 1 MB "name" cannot flood the terminal. */
#define TS__ESC_CAP 128

/* Writes the n bytes at s into buf (cap bytes, cap >= 4) as printable ASCII: bytes 0x20..0x7E
 * are kept, except '"' and '\\' which get a backslash; \n, \r, \t are written as such; every
 * other byte (controls, DEL, bytes >= 0x80, NUL) as \xNN. When the escaped text does not fit,
 * it is cut at an escape boundary and ends with "...". Always NUL-terminated; returns buf, so
 * the call can sit in a printf argument list. */
const char *ts__text_escape(const void *s, size_t n, char *buf, size_t cap);

/* The same for a NUL-terminated string (NULL prints as "(null)"). */
const char *ts__text_escape_str(const char *s, char *buf, size_t cap);

#endif
