/* elementwise.toml: Add, Mul, Gelu, FastGelu, BiasGelu, Sigmoid, QuickGelu, ReduceMean: this ISA path's table (included once by isa_body.inc.c). */
static const pb_eltwise_table PB_CAT(pb_eltwise_table_, PB_ISA) = {
    .binary_vv = {{PB_UK(f32, add_vv), PB_UK(f16, add_vv), PB_UK(bf16, add_vv)},
                  {PB_UK(f32, mul_vv), PB_UK(f16, mul_vv), PB_UK(bf16, mul_vv)}},
    .binary_vs = {{PB_UK(f32, add_vs), PB_UK(f16, add_vs), PB_UK(bf16, add_vs)},
                  {PB_UK(f32, mul_vs), PB_UK(f16, mul_vs), PB_UK(bf16, mul_vs)}},
    .gelu = {{PB_UK(f32, gelu_erf), PB_UK(f16, gelu_erf), PB_UK(bf16, gelu_erf)},
             {PB_UK(f32, gelu_tanh), PB_UK(f16, gelu_tanh), PB_UK(bf16, gelu_tanh)}},
    .sigmoid = {{PB_UK(f32, sigmoid_plain), PB_UK(f16, sigmoid_plain), PB_UK(bf16, sigmoid_plain)},
                {PB_UK(f32, sigmoid_mul), PB_UK(f16, sigmoid_mul), PB_UK(bf16, sigmoid_mul)}},
    .sum = {PB_UK(f32, sum), PB_UK(f16, sum), PB_UK(bf16, sum)},
    .colmean = {PB_UK(f32, colmean), PB_UK(f16, colmean), PB_UK(bf16, colmean)},
};
