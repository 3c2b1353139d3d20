/* Tile language checker: one test per diagnostic (exact message and position), race
 * detection in parallel loops, and programs that must be accepted. */
#include "test_tile_common.h"

#include <stdio.h>

static void expect_first(ts_test_ctx *ts_t_, const char *src, const char *want) {
    char buf[512];
    tt_first_diag(src, buf, sizeof buf);
    TS_CHECK_MSG(!strcmp(buf, want), "got  '%s'\nwant '%s'", buf, want);
}

TS_TEST(tile_check_unknown_name) {
    expect_first(ts_t_,
                 TT_KERNEL("        let a = q;\n"),
                 "t.tile:3:17: error: unknown name 'q'");
}
TS_TEST(tile_check_redefined) {
    expect_first(ts_t_,
                 TT_KERNEL("        let a = 1;\n        let a = 2;\n"),
                 "t.tile:4:9: error: 'a' redefined (previous definition at 3:9)");
}
TS_TEST(tile_check_reserved_name) {
    expect_first(ts_t_,
                 TT_KERNEL("        let __a = 1;\n"),
                 "t.tile:3:9: error: names starting with '__' are reserved for the compiler");
}
TS_TEST(tile_check_tensor_as_value) {
    expect_first(ts_t_,
                 TT_KERNEL("        let a = x;\n"),
                 "t.tile:3:17: error: 'x' is a tensor; index it to get an element");
}
TS_TEST(tile_check_index_rank) {
    expect_first(ts_t_,
                 TT_KERNEL("        let a = x[b];\n"),
                 "t.tile:3:18: error: 'x' has rank 2 but is indexed with 1 indices");
}
TS_TEST(tile_check_index_not_integer) {
    expect_first(ts_t_,
                 TT_KERNEL("        let a = x[b, 1.0];\n"),
                 "t.tile:3:22: error: index must be an integer, found 'float literal'");
}
TS_TEST(tile_check_mixed_int_float) {
    expect_first(ts_t_,
                 TT_KERNEL("        let a = s + 1;\n        let c = b + s;\n"),
                 "t.tile:4:19: error: mixed integer and float operands of '+' ('i64' and 'f32'); use cast<...>");
}
TS_TEST(tile_check_mixed_signedness) {
    expect_first(ts_t_,
                 TT_KERNEL("        let a = cast<i32>(b) + cast<u32>(b);\n"),
                 "t.tile:3:30: error: mixed signed and unsigned operands of '+' ('i32' and 'u32'); use cast<...>");
}
TS_TEST(tile_check_mixed_float_widths) {
    expect_first(ts_t_,
                 TT_KERNEL("        let a = cast<f64>(s) * s;\n"),
                 "t.tile:3:30: error: mixed float operands of '*' ('f64' and 'f32'); use cast<...>");
}
TS_TEST(tile_check_mod_needs_integers) {
    expect_first(ts_t_,
                 TT_KERNEL("        let a = s % 2.0;\n"),
                 "t.tile:3:19: error: operands of '%' must be integers, found 'f32'");
}
TS_TEST(tile_check_bool_arithmetic) {
    expect_first(ts_t_,
                 TT_KERNEL("        let a = true + 1;\n"),
                 "t.tile:3:22: error: operands of '+' have types 'bool' and 'integer literal'");
}
TS_TEST(tile_check_not_needs_bool) {
    expect_first(ts_t_,
                 TT_KERNEL("        let a = !s;\n"),
                 "t.tile:3:17: error: operand of '!' must be bool, found 'f32'");
}
TS_TEST(tile_check_bitcast_sizes) {
    expect_first(ts_t_,
                 TT_KERNEL("        let a = bitcast<i16>(s);\n"),
                 "t.tile:3:17: error: bitcast from 'f32' (4 bytes) to 'i16' (2 bytes): sizes differ");
}
TS_TEST(tile_check_bitcast_literal) {
    expect_first(ts_t_,
                 TT_KERNEL("        let a = bitcast<i32>(1.0);\n"),
                 "t.tile:3:30: error: bitcast needs a typed operand (cast the literal first)");
}
TS_TEST(tile_check_call_arity) {
    expect_first(ts_t_,
                 TT_KERNEL("        let a = exp(s, s);\n"),
                 "t.tile:3:17: error: exp() takes 1 argument, 2 given");
}
TS_TEST(tile_check_math_needs_float) {
    expect_first(ts_t_,
                 TT_KERNEL("        let a = exp(b);\n"),
                 "t.tile:3:21: error: exp() needs a float argument, found 'i64'");
}
TS_TEST(tile_check_unknown_function) {
    expect_first(ts_t_,
                 TT_KERNEL("        let a = frob(s);\n"),
                 "t.tile:3:17: error: unknown function 'frob'");
}
TS_TEST(tile_check_tile_op_as_value) {
    expect_first(ts_t_,
                 TT_KERNEL("        let a = copy(x, y);\n"),
                 "t.tile:3:17: error: 'copy' is a statement, not a value");
}
TS_TEST(tile_check_select_condition) {
    expect_first(ts_t_,
                 TT_KERNEL("        let a = select(s, s, s);\n"),
                 "t.tile:3:24: error: select() condition must be bool, found 'f32'");
}
TS_TEST(tile_check_inf_of_integer) {
    expect_first(ts_t_,
                 TT_KERNEL("        let a = inf<i32>;\n"),
                 "t.tile:3:17: error: inf<i32>: dtype has no infinity");
}
TS_TEST(tile_check_slice_outside_copy) {
    expect_first(ts_t_,
                 TT_KERNEL("        let a = x[b, 0:4];\n"),
                 "t.tile:3:23: error: slices are only allowed in copy() regions");
}
TS_TEST(tile_check_constant_index_out_of_range) {
    expect_first(ts_t_,
                 TT_KERNEL("        tile t: f32[4];\n        t[4] = 1.0;\n"),
                 "t.tile:4:11: error: index 4 out of range for dimension 0 of tile 't' (size 4)");
}
TS_TEST(tile_check_tile_dim_not_constant) {
    expect_first(ts_t_,
                 TT_KERNEL("        tile t: f32[N];\n"),
                 "t.tile:3:21: error: tile dimension must be a positive compile-time integer");
}
TS_TEST(tile_check_packed_tile_dtype) {
    expect_first(ts_t_,
                 TT_KERNEL("        tile t: e2m1x2[4];\n"),
                 "t.tile:3:9: error: packed dtype 'e2m1x2' is for tensors only; use 'u8' tiles");
}
TS_TEST(tile_check_assign_needs_cast) {
    expect_first(ts_t_,
                 TT_KERNEL("        tile t: i32[4];\n        t[0] = s;\n"),
                 "t.tile:4:16: error: cannot convert 'f32' to 'i32' implicitly in an assignment; use cast<i32>(...)");
}
TS_TEST(tile_check_init_needs_cast) {
    expect_first(ts_t_,
                 TT_KERNEL("        var v: i32 = b;\n"),
                 "t.tile:3:22: error: cannot convert 'i64' to 'i32' implicitly in an initialisation; use cast<i32>(...)");
}
TS_TEST(tile_check_assign_to_immutable) {
    expect_first(ts_t_,
                 TT_KERNEL("        s = 1.0;\n"),
                 "t.tile:3:9: error: cannot assign to 's': only 'var' variables and elements are assignable");
}
TS_TEST(tile_check_copy_whole_symbolic_tensor) {
    expect_first(ts_t_,
                 TT_KERNEL("        tile t: f32[4];\n        copy(x, t);\n"),
                 "t.tile:4:14: error: copy() of the whole tensor 'x' needs constant dims matching the tile; give a start corner like x[r, 0]");
}
TS_TEST(tile_check_copy_needs_tile) {
    expect_first(ts_t_,
                 TT_KERNEL("        copy(x[b, 0], y[b, 0]);\n"),
                 "t.tile:3:9: error: copy() needs a tile on at least one side");
}
TS_TEST(tile_check_copy_region_mismatch) {
    expect_first(ts_t_,
                 TT_KERNEL("        tile t: f32[4];\n        copy(x[b, 0:8], t);\n"),
                 "t.tile:4:15: error: copy() region extents [1, 8] do not match tile 't' of shape [4]");
}
TS_TEST(tile_check_copy_run_must_fill_the_tile) {
    /* a run along the last dim fills a 2-D tile row-major only when its length is the tile's
     * element count; two extents > 1 cannot be reshaped */
    expect_first(ts_t_,
                 TT_KERNEL("        tile t: f32[2, 4];\n        copy(x[b, 0:6], t);\n"),
                 "t.tile:4:15: error: copy() region extents [1, 6] do not match tile 't' of shape [2, 4]");
}
TS_TEST(tile_check_copy_slice_not_constant) {
    expect_first(ts_t_,
                 TT_KERNEL("        tile t: f32[4];\n        copy(x[b, 0:M], t);\n"),
                 "t.tile:4:20: error: slice extent must be a compile-time constant (write lo:lo+N)");
}
TS_TEST(tile_check_copy_dtype_mismatch) {
    expect_first(ts_t_,
                 TT_KERNEL("        tile t: i32[4];\n        copy(x[b, 0], t);\n"),
                 "t.tile:4:9: error: copy() from 'f32' to 'i32' needs an explicit cast");
}
TS_TEST(tile_check_copy_fill_on_store) {
    expect_first(ts_t_,
                 TT_KERNEL("        tile t: f32[4];\n        copy(t, x[b, 0], fill=1.0);\n"),
                 "t.tile:4:26: error: fill= applies only to a copy from a tensor into a tile");
}
TS_TEST(tile_check_copy_unknown_kwarg) {
    expect_first(ts_t_,
                 TT_KERNEL("        tile t: f32[4];\n        copy(x[b, 0], t, pad=1.0);\n"),
                 "t.tile:4:26: error: unknown argument 'pad' for copy()");
}
TS_TEST(tile_check_reduce_shape) {
    expect_first(ts_t_,
                 TT_KERNEL("        tile t: f32[4, 8];\n        tile r: f32[8];\n        reduce<sum>(t, r, axis=1);\n"),
                 "t.tile:5:9: error: reduce destination 'r' must have the source shape without axis 1");
}
TS_TEST(tile_check_reduce_unknown_op) {
    expect_first(ts_t_,
                 TT_KERNEL("        tile t: f32[4, 8];\n        tile r: f32[4];\n        reduce<mean>(t, r);\n"),
                 "t.tile:5:9: error: reduce needs one of sum, max, min, abssum, absmax, and, or, xor: reduce<sum>(src, dst)");
}
TS_TEST(tile_check_reduce_bitwise_on_float) {
    expect_first(ts_t_,
                 TT_KERNEL("        tile t: f32[4, 8];\n        tile r: f32[4];\n        reduce<and>(t, r);\n"),
                 "t.tile:5:9: error: reduce<and> needs integer tiles, 't' is 'f32'");
}
TS_TEST(tile_check_reduce_axis_range) {
    expect_first(ts_t_,
                 TT_KERNEL("        tile t: f32[4, 8];\n        tile r: f32[4];\n        reduce<sum>(t, r, axis=2);\n"),
                 "t.tile:5:32: error: axis 2 out of range for a rank-2 tile");
}
TS_TEST(tile_check_reduce_accumulate_not_bool) {
    expect_first(ts_t_,
                 TT_KERNEL("        tile t: f32[4, 8];\n        tile r: f32[4];\n        reduce<sum>(t, r, accumulate=1);\n"),
                 "t.tile:5:38: error: 'accumulate' must be true or false");
}
TS_TEST(tile_check_reduce_order) {
    expect_first(ts_t_,
                 TT_KERNEL("        tile t: f32[4, 8];\n        tile r: f32[4];\n        reduce<sum>(t, r, order=\"tree\");\n"),
                 "t.tile:5:33: error: order must be \"lanes8\" or \"serial\"");
}
TS_TEST(tile_check_reduce_destination_tensor) {
    expect_first(ts_t_,
                 TT_KERNEL("        tile t: f32[4, 8];\n        reduce<sum>(t, x);\n"),
                 "t.tile:4:24: error: reduce() destination must be a tile; 'x' is a tensor");
}
TS_TEST(tile_check_gemm_shapes) {
    expect_first(ts_t_,
                 TT_KERNEL("        tile a: f32[4, 8];\n        tile c: f32[4, 4];\n        gemm(a, a, c);\n"),
                 "t.tile:5:9: error: gemm() shapes do not match: A is 4x8, B is 4x8, C is 4x4 (M=4 K=8 N=8)");
}
TS_TEST(tile_check_gemm_accumulator_dtype) {
    expect_first(ts_t_,
                 TT_KERNEL("        tile a: f32[4, 8];\n        tile c: bf16[4, 4];\n        gemm(a, a, c, tb=true);\n"),
                 "t.tile:5:20: error: gemm() accumulates in f32: C must be an f32 tile");
}
TS_TEST(tile_check_gemm_input_dtype) {
    expect_first(ts_t_,
                 TT_KERNEL("        tile a: i32[4, 8];\n        tile c: f32[4, 4];\n        gemm(a, a, c, tb=true);\n"),
                 "t.tile:5:14: error: gemm() inputs must be f32, bf16, f16, e4m3 or e5m2, found 'i32'");
}
TS_TEST(tile_check_atomic_target) {
    expect_first(ts_t_,
                 TT_KERNEL("        atomic_add(x[b, 0], 1.0);\n        atomic_add(b, 1);\n"),
                 "t.tile:4:20: error: atomic_add() target must be an element like x[i, j]");
}
TS_TEST(tile_check_prefetch_target) {
    expect_first(ts_t_, TT_KERNEL("        prefetch(x[b + 5, 0]);\n        prefetch(b);\n"),
                 "t.tile:4:18: error: prefetch() needs a tensor element like x[i, j]");
    expect_first(ts_t_, TT_KERNEL("        tile t: f32[4];\n        for i in parallel(4) { prefetch(t[i]); }\n"),
                 "t.tile:4:42: error: prefetch() needs a tensor element, 't' is not a tensor");
}
TS_TEST(tile_check_tile_op_in_parallel) {
    expect_first(ts_t_,
                 TT_KERNEL("        tile t: f32[4];\n        for i in parallel(4) { copy(x[b, 0], t); }\n"),
                 "t.tile:4:32: error: 'copy' is not allowed inside a parallel loop (tile operations act on whole tiles)");
}
TS_TEST(tile_check_tile_in_parallel) {
    expect_first(ts_t_,
                 TT_KERNEL("        for i in parallel(4) { tile t: f32[4]; }\n"),
                 "t.tile:3:32: error: tile allocation is not allowed inside a parallel loop");
}
TS_TEST(tile_check_parallel_extent_count) {
    expect_first(ts_t_,
                 TT_KERNEL("        for i in parallel(4, 4) { }\n"),
                 "t.tile:3:18: error: parallel() has 2 extents for 1 loop variables");
}
TS_TEST(tile_check_serial_one_variable) {
    expect_first(ts_t_,
                 TT_KERNEL("        for i, j in serial(4) { }\n"),
                 "t.tile:3:16: error: serial() loops have one variable");
}
TS_TEST(tile_check_loop_step_not_constant) {
    expect_first(ts_t_,
                 TT_KERNEL("        for i in serial(0, 4, b) { }\n"),
                 "t.tile:3:31: error: loop step must be a non-zero compile-time integer");
}
TS_TEST(tile_check_unknown_loop_form) {
    expect_first(ts_t_,
                 TT_KERNEL("        for i in vector(4) { }\n"),
                 "t.tile:3:18: error: unknown loop form 'vector' (parallel, serial, unroll, pipelined)");
}
TS_TEST(tile_check_pipelined_stages) {
    expect_first(ts_t_,
                 TT_KERNEL("        for i in pipelined(4, stages=0) { }\n"),
                 "t.tile:3:38: error: stages must be a positive compile-time integer");
}
TS_TEST(tile_check_loop_bound_float) {
    expect_first(ts_t_,
                 TT_KERNEL("        for i in serial(s) { }\n"),
                 "t.tile:3:25: error: loop bounds must be integers, found 'f32'");
}
TS_TEST(tile_check_break_in_parallel) {
    expect_first(ts_t_,
                 TT_KERNEL("        for i in parallel(4) { break; }\n"),
                 "t.tile:3:32: error: 'break' outside a serial loop (a parallel iteration cannot be left early)");
}
TS_TEST(tile_check_break_outside_loop) {
    expect_first(ts_t_,
                 TT_KERNEL("        break;\n"),
                 "t.tile:3:9: error: 'break' outside a serial loop");
}
TS_TEST(tile_check_condition_not_bool) {
    expect_first(ts_t_,
                 TT_KERNEL("        if s { }\n"),
                 "t.tile:3:12: error: condition must be bool, found 'f32'");
}
TS_TEST(tile_check_nested_launch) {
    expect_first(ts_t_,
                 TT_KERNEL("        launch (1) as (c) { }\n"),
                 "t.tile:3:9: error: launch cannot be nested");
}
TS_TEST(tile_check_check_condition) {
    expect_first(ts_t_,
                 TT_KERNEL("        check(s);\n"),
                 "t.tile:3:15: error: check() condition must be bool, found 'f32'");
}
TS_TEST(tile_check_check_message) {
    expect_first(ts_t_,
                 TT_KERNEL("        check(true, s);\n"),
                 "t.tile:3:21: error: check() message must be a string literal");
}
TS_TEST(tile_check_unused_result) {
    expect_first(ts_t_,
                 TT_KERNEL("        max(s, s);\n"),
                 "t.tile:3:9: error: result of max() is unused");
}
TS_TEST(tile_check_tile_outside_launch) {
    expect_first(ts_t_,
                 "kernel k(x: tensor<f32, [N]>) { tile t: f32[4]; launch (N) as (b) { } }",
                 "t.tile:1:33: error: tiles can only be allocated inside a launch");
}
TS_TEST(tile_check_kernel_without_launch) {
    expect_first(ts_t_,
                 "kernel k(x: tensor<f32, [N]>) { let a = 1; }",
                 "t.tile:1:1: error: kernel 'k' has no launch");
}
TS_TEST(tile_check_tensor_dtype_without_storage) {
    expect_first(ts_t_,
                 "kernel k(x: tensor<u16, [N]>) { launch (N) as (b) { } }",
                 "t.tile:1:10: error: dtype 'u16' has no tensor storage (no ts_dtype for it)");
}
TS_TEST(tile_check_param_redefined) {
    expect_first(ts_t_,
                 "kernel k(x: tensor<f32, [N]>, x: f32) { launch (N) as (b) { } }",
                 "t.tile:1:31: error: 'x' redefined (previous definition at 1:10)");
}
TS_TEST(tile_check_strides_count) {
    expect_first(ts_t_,
                 "kernel k(x: tensor<f32, [N, M], strides=[S]>) { launch (N) as (b) { } }",
                 "t.tile:1:42: error: tensor 'x' has 2 dims but 1 strides");
}
TS_TEST(tile_check_scalar_param_dtype) {
    expect_first(ts_t_,
                 "kernel k(v: bf16) { launch (1) as (b) { } }",
                 "t.tile:1:10: error: scalar parameter 'v' must be bool, an integer, f32 or f64");
}
TS_TEST(tile_check_launch_names) {
    expect_first(ts_t_,
                 "kernel k() { launch (1, 2) as (b) { } }",
                 "t.tile:1:14: error: launch takes 1 to 3 grid extents and as many block index names (2 and 1 given)");
}
TS_TEST(tile_check_launch_extent_float) {
    expect_first(ts_t_,
                 "kernel k() { launch (1.0) as (b) { } }",
                 "t.tile:1:22: error: grid extent must be an integer, found 'float literal'");
}
TS_TEST(tile_check_kernel_redefined) {
    expect_first(ts_t_,
                 "kernel k() { launch (1) as (b) { } }\nkernel k() { launch (1) as (b) { } }",
                 "t.tile:2:1: error: kernel 'k' redefined");
}
TS_TEST(tile_check_macro_arity) {
    expect_first(ts_t_,
                 "macro m(a, b) { }\nkernel k() { launch (1) as (b) { m(1); } }",
                 "t.tile:2:34: error: macro 'm' takes 2 arguments, 1 given");
}
TS_TEST(tile_check_macro_as_value) {
    expect_first(ts_t_,
                 "macro m(a) { let v = a; }\nkernel k() { launch (1) as (b) { let z = m(1); } }",
                 "t.tile:2:42: error: macro 'm' expands to statements and cannot be used as a value");
}
TS_TEST(tile_check_const_not_constant) {
    expect_first(ts_t_,
                 "const A = s;\n",
                 "t.tile:1:11: error: unknown name 's'");
}
TS_TEST(tile_check_race_constant_index) {
    expect_first(ts_t_,
                 TT_KERNEL("        tile t: f32[4];\n        for i in parallel(4) { t[0] = 1.0; }\n"),
                 "t.tile:4:37: error: race: the index of this write to 't' does not depend on parallel loop variable 'i', so iterations write the same element");
}
TS_TEST(tile_check_race_missing_inner_variable) {
    expect_first(ts_t_,
                 TT_KERNEL("        tile t: f32[4, 4];\n        for i, j in parallel(4, 4) { t[i, 0] = 1.0; }\n"),
                 "t.tile:4:46: error: race: the index of this write to 't' does not depend on parallel loop variable 'j', so iterations write the same element");
}
TS_TEST(tile_check_race_outer_var) {
    expect_first(ts_t_,
                 TT_KERNEL("        var acc: f32 = 0.0;\n        for i in parallel(4) { acc += 1.0; }\n"),
                 "t.tile:4:36: error: race: every iteration of the parallel loop assigns 'acc', declared outside it (use reduce, or a serial loop)");
}
TS_TEST(tile_check_race_tensor_write) {
    expect_first(ts_t_,
                 TT_KERNEL("        for j in parallel(M) { y[b, 0] = x[b, j]; }\n"),
                 "t.tile:3:40: error: race: the index of this write to 'y' does not depend on parallel loop variable 'j', so iterations write the same element");
}
TS_TEST(tile_check_race_nested_parallel) {
    expect_first(ts_t_,
                 TT_KERNEL("        tile t: f32[4, 4];\n        for i in parallel(4) { for j in parallel(4) { t[i, 1] = 0.0; } }\n"),
                 "t.tile:4:63: error: race: the index of this write to 't' does not depend on parallel loop variable 'j', so iterations write the same element");
}

/* lets carry the dependence on loop variables; locals of the iteration and atomics are fine */
TS_TEST(tile_check_race_free_patterns_accepted) {
    expect_first(ts_t_,
                 TT_KERNEL("        tile t: f32[8];\n        for i in parallel(4) { let r = i * 2; t[r] = 1.0; var v: f32 = 0.0; v = 2.0; }\n        for i in parallel(M) { atomic_add(y[0, 0], x[b, i]); }\n"),
                 "<no error>");
}

/* a parallel dim of extent 1 has one iteration: an index without its variable is no race (a
 * 1-token copy such as copy(s, sf[bt * BT:bt * BT + BT, g]) with BT = 1 lowers to one) */
TS_TEST(tile_check_race_extent_one_dim_accepted) {
    expect_first(ts_t_,
                 TT_KERNEL("        tile t: f32[4, 4];\n        for i, j in parallel(1, 4) { t[0, j] = 1.0; }\n"),
                 "<no error>");
    expect_first(ts_t_,
                 TT_KERNEL("        tile t: f32[4, 4];\n        for i, j in parallel(2, 4) { t[0, j] = 1.0; }\n"),
                 "t.tile:4:46: error: race: the index of this write to 't' does not depend on parallel loop variable 'i', so iterations write the same element");
}

/* a launch inside a macro: fine when the macro is called at the kernel's top level (expanded
 * in place), refused inside a launch */
TS_TEST(tile_check_launch_in_macro) {
    expect_first(ts_t_,
                 "macro go(y) {\n    launch (4) as (b) { y[b] = 1.0; }\n}\n"
                 "kernel k(y: tensor<f32, [4]>) {\n    go(y);\n    go(y);\n}\n",
                 "<no error>");
    expect_first(ts_t_,
                 "macro go(y) {\n    launch (4) as (b) { y[b] = 1.0; }\n}\n"
                 "kernel k(y: tensor<f32, [4]>) {\n    launch (1) as (c) { go(y); }\n}\n",
                 "t.tile:2:5: error: launch cannot be nested");
}

/* an e2m1 value bitcasts to u8 / i8 (its 4-bit code) and to nothing else */
TS_TEST(tile_check_bitcast_e2m1_code) {
    expect_first(ts_t_, TT_KERNEL("        let c = bitcast<u8>(cast<e2m1>(1.5));\n        let d = bitcast<i8>(cast<e2m1>(-3.0));\n"),
                 "<no error>");
    expect_first(ts_t_, TT_KERNEL("        let c = bitcast<e2m1>(cast<u8>(3));\n"),
                 "t.tile:3:17: error: bitcast from 'u8' to 'e2m1' is not defined (an e2m1 value bitcasts only to u8 or i8, its 4-bit code; bool not at all): use cast");
    expect_first(ts_t_, TT_KERNEL("        let c = bitcast<u8>(true);\n"),
                 "t.tile:3:17: error: bitcast from 'bool' to 'u8' is not defined (an e2m1 value bitcasts only to u8 or i8, its 4-bit code; bool not at all): use cast");
}

TS_TEST(tile_check_reports_several_errors_then_stops) {
    /* the checker continues after an error (one line each) and stops after 20 */
    char src[4096] = "kernel k() {\n    launch (1) as (b) {\n";
    for (int i = 0; i < 30; i++) sprintf(src + strlen(src), "        let a%d = nope;\n", i);
    strcat(src, "    }\n}\n");
    char *out = NULL, *diag = NULL;
    TS_CHECK_STATUS(tt_translate(src, TS_TILE_EMIT_C, &out, &diag), TS_ERR_INVALID_ARGUMENT);
    int n = 0;
    for (const char *p = diag; p && (p = strstr(p, ": error: unknown name 'nope'")); p++) n++;
    TS_CHECK_EQ_INT(n, 20);
    TS_CHECK(diag && strstr(diag, "t.tile:22:19: error: unknown name 'nope'"));
    TS_CHECK(diag && strstr(diag, "t.tile: too many errors, stopping\n"));
    free(out);
    free(diag);
}

TS_TEST(tile_check_macro_hygiene) {
    /* the macro's local 'v' must not capture the caller's 'v' passed as an argument */
    const char *src = "macro put(t, v) {\n"
                      "    let w = v;\n"
                      "    for i in parallel(4) {\n"
                      "        let v = w + 1.0;\n"
                      "        t[i] = v;\n"
                      "    }\n"
                      "}\n"
                      "kernel k(x: tensor<f32, [4]>) {\n"
                      "    launch (1) as (b) {\n"
                      "        tile t: f32[4];\n"
                      "        let v = 2.0;\n"
                      "        put(t, v);\n"
                      "        copy(t, x[0]);\n"
                      "    }\n"
                      "}\n";
    char *out = NULL, *diag = NULL;
    TS_CHECK_STATUS(tt_translate(src, TS_TILE_EMIT_IR, &out, &diag), TS_OK);
    TS_CHECK_MSG(out && strstr(out, "let w__m1 = v;") && strstr(out, "let v__m1 = w__m1 + 1.0;") &&
                     strstr(out, "t[i__m1] = v__m1;"),
                 "%s", out ? out : diag);
    free(out);
    free(diag);
}

/* A macro called inside another macro's body sees the enclosing macro's locals by their source
 * names (innermost first), as written at the call; its own locals stay its own; arguments from
 * the caller are not captured. */
TS_TEST(tile_check_nested_macro_sees_callers_locals) {
    static const char src[] =
        "macro inner(v) {\n"
        "    y[t] = v + cast<f32>(t);\n"
        "    for t in serial(2) { z[t] = v; }\n"
        "}\n"
        "macro outer(v) {\n"
        "    for t in serial(N) {\n"
        "        inner(v * 2.0);\n"
        "    }\n"
        "}\n"
        "kernel k(y: tensor<f32, [N]>, z: tensor<f32, [2]>) {\n"
        "    launch (1) as (t) {\n"
        "        let w = cast<f32>(t);\n"
        "        outer(w);\n"
        "    }\n"
        "}\n";
    char *out = NULL, *diag = NULL;
    TS_CHECK_STATUS(tt_translate(src, TS_TILE_EMIT_IR, &out, &diag), TS_OK);
    /* inner's free t is outer's loop variable (innermost), not the launch's t; its own loop
     * variable is its own; the argument is outer's v * 2.0, outer's v the kernel's w */
    TS_CHECK_MSG(out && strstr(out, "y[t__m1] = w * 2.0 + cast<f32>(t__m1);") &&
                     strstr(out, "for t__m2 in serial(2)") && strstr(out, "z[t__m2] = w * 2.0;"),
                 "%s", out ? out : diag);
    free(out);
    free(diag);
}

TS_TEST(tile_check_kitchen_sink_accepted) {
    char buf[512];
    TS_CHECK_MSG(!strcmp(tt_first_diag(tt_kitchen_sink, buf, sizeof buf), "<no error>"), "%s", buf);
}
