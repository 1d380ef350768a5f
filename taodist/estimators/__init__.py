"""scikit-learn estimators (exported from :mod:`taodist`).

``tree``       :class:`~taodist.TAOClassifier`, :class:`~taodist.TAORegressor`
``forest``     :class:`~taodist.TAOForestClassifier`, :class:`~taodist.TAOForestRegressor`
``path``       :func:`~taodist.tao_path`, trees along a path of decreasing ``C``
``execution``  where a fit runs: in this process, or on a Dask cluster through :mod:`taodist.dask`
"""
