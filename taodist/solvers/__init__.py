"""Numerical solvers: arrays in, arrays out; no trees, no TAO.

``l1_logistic``        l1-regularised weighted logistic regression by FISTA, every node of a level in one
                       compiled call (the oblique node surrogate)
``l1_logistic_torch``  the same on a CUDA GPU through PyTorch (optional)
``softmax``            l1-regularised multinomial logistic regression by FISTA (softmax leaves on sparse rows)
``row_kernels``        the compiled dense/CSR row kernels of the FISTA solvers (margins, gradients, metric,
                       Lipschitz estimate)
``fista``              the scalar FISTA steps they share (soft-threshold, sufficient decrease, momentum/restart)
``saga``               compiled SAGA for l1 logistic regression (softmax leaves on dense rows)
``block_cg``           block preconditioned conjugate gradients over row blocks (LapTAO's label step)
"""
