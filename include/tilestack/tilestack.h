/* tilestack umbrella header. */
#ifndef TILESTACK_H
#define TILESTACK_H
#include "tilestack/core.h"
#include "tilestack/numerics.h"
#include "tilestack/quant.h"
#include "tilestack/gemm.h"
#include "tilestack/select.h"
#include "tilestack/attention.h"
#include "tilestack/tile.h"
#include "tilestack/tokenizer.h"
#endif
