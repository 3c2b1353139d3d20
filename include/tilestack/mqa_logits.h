/* MQA logits on CPU (being written). */
#ifndef TILESTACK_MQA_LOGITS_H
#define TILESTACK_MQA_LOGITS_H
#include "tilestack/core.h"
#endif
