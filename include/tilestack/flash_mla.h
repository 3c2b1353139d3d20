/* FlashMLA on CPU (being written). */
#ifndef TILESTACK_FLASH_MLA_H
#define TILESTACK_FLASH_MLA_H
#include "tilestack/core.h"
#endif
