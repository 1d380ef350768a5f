"""Ad-hoc variants on the command line: ``"key=value key=value"`` -> estimator parameters."""

import ast


def parse_key_values(spec, usage):
    """``{key: value}`` of ``spec``, values read as Python literals (else kept as strings).

    ``usage`` ends the error raised for an item without ``=``.
    """
    params = {}
    for item in spec.split():
        key, sep, value = item.partition("=")
        if not sep:
            raise SystemExit(f"Bad variant {spec!r}: {usage}")
        try:
            params[key] = ast.literal_eval(value)
        except (ValueError, SyntaxError):
            params[key] = value
    return params
