/* DeepSeek Sparse Attention on tilestack: FlashMLA (MLA decode and sparse prefill, FP8 KV cache
 * helpers) and DeepGEMM's MQA logits (the lightning indexer). */
#ifndef TILESTACK_ATTENTION_H
#define TILESTACK_ATTENTION_H
#include "tilestack/flash_mla.h"
#include "tilestack/mqa_logits.h"
#endif
