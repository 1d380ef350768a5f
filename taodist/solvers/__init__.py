"""Numerical solvers: arrays in, arrays out; no trees, no TAO.

``row_kernels``        compiled products of dense or CSR rows (margins, X^T r, curvature, Lipschitz estimate)
``fista``              the scalar steps both FISTA solvers share (soft-threshold, sufficient decrease, momentum)
``l1_logistic``        l1-regularised weighted logistic regression by FISTA, every node of a level in one
                       compiled call (the oblique node surrogate)
``l1_logistic_torch``  the same on a CUDA GPU through PyTorch (optional)
``softmax``            l1-regularised multinomial logistic regression by FISTA (softmax leaves on sparse rows)
``saga``               compiled SAGA for l1 logistic regression (softmax leaves on dense rows)
``block_cg``           block preconditioned conjugate gradients over row blocks (LapTAO's label step)
"""
