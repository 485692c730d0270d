/* elementwise.toml: Add, Mul, Gelu, FastGelu, BiasGelu, ReduceMean: per-dtype microkernels (included once per dtype by isa_body.inc.c). */
