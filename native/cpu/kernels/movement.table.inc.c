/* data_movement.toml: Transpose, Gather, Concat, ScatterND, Trilu: this ISA path's table (included once by isa_body.inc.c). */
#define PB_MV_ALL(op) {PB_UK(f32, op), PB_UK(f16, op), PB_UK(bf16, op)}
static const pb_movement_table PB_CAT(pb_movement_table_, PB_ISA) = {
    .transpose_runs = PB_MV_ALL(transpose_runs),
    .transpose_tiles = PB_MV_ALL(transpose_tiles),
    .gather = PB_MV_ALL(gather),
    .concat = PB_MV_ALL(concat),
    .reduce = PB_MV_ALL(reduce),
    .trilu = PB_MV_ALL(trilu),
    .copy = PB_MV_ALL(copy),
};
#undef PB_MV_ALL
