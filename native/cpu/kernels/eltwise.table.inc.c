/* elementwise.toml: Add, Mul, Gelu, FastGelu, BiasGelu, ReduceMean: this ISA path's table (included once by isa_body.inc.c). */
static const pb_eltwise_table PB_CAT(pb_eltwise_table_, PB_ISA) = {0};
