"""What the actor executor's driver and its chunk hosts send each other.

The driver (:mod:`taodist.dask._actor_executor`) queues ops for each host
(:mod:`taodist.dask._actor_host`) and sends them in rounds; the hosts read
each other's results within a round. Both sides speak in the terms defined
here:

* :class:`Packed`: every message, pickled once.
* :class:`Ref`: a result kept on a host, in an op's arguments or the
  driver's handles; :class:`Select` picks a node group's pieces out of a
  host's parts; :func:`pick` applies either to a value.
* :class:`RoutingToken`: a tree snapshot the host already holds
  (:data:`KEPT_ROUTINGS` of them, a rule both sides follow).
* :class:`PeerFailed` and :func:`sendable_error`: how a failed op reaches
  the hosts waiting on it and the driver.
* :func:`walk`, :func:`refs_in` and :func:`substitute`: the references in
  (nested lists and tuples of) arguments, and those arguments with the
  references replaced by values.
"""

import pickle
import traceback

#: tree snapshots a host keeps (the newest); the driver mirrors the rule to know what it must resend
KEPT_ROUTINGS = 2

#: arrays of fewer bytes go inside a :class:`Packed` value's pickle; larger ones travel as frames of their own
PACK_INBAND_BYTES = 64 * 1024


class PeerFailed(RuntimeError):
    """A chunk host's ops failed before making a result another host waits for (the other host's error is the cause)."""


class Ref:
    """A handle to a result kept on a host: ``value[item]`` of its result ``key`` (the whole value if None)."""

    __slots__ = ("host", "key", "item")

    def __init__(self, host, key, item=None):
        self.host, self.key, self.item = host, key, item


class RoutingToken:
    """Stands for a Routing the host already holds (a tree snapshot is shipped once per host)."""

    __slots__ = ("n",)

    def __init__(self, n):
        self.n = n


class Select:
    """Stands for the pieces of some keys in a host's parts: ``[(chunk, {key: piece})]``, chunks that have any."""

    __slots__ = ("keys",)

    def __init__(self, keys):
        self.keys = keys


class Packed:
    """A value pickled once, its small arrays inside the pickle: what the hosts and the driver send each other.

    Dask serialises a call's arguments and result element by element, and
    every NumPy array becomes a frame of its own with its own header. A
    round's ops carry hundreds of small arrays (the node jobs' warm starts,
    the evaluations): sent as they are, a round pays a header and a frame
    for each of them; pickled into one buffer, it pays for one.
    Arrays of at least :data:`PACK_INBAND_BYTES` stay out of the pickle
    (Dask sends them without a copy: the rows of a node group's care points).

    The value is pickled when packed, so a value that cannot be pickled
    fails the call that packs it (Dask, failing to serialise a message,
    only logs it: the caller would wait for ever).
    """

    __slots__ = ("header", "large", "_value")

    def __init__(self, value):
        self.large, self._value = [], value
        try:
            self.header = pickle.dumps(value, protocol=5, buffer_callback=self._inband)
        except Exception:  # a function defined in place (as Dask does: cloudpickle when pickle cannot)
            import cloudpickle

            self.large = []
            self.header = cloudpickle.dumps(value, protocol=5, buffer_callback=self._inband)

    def _inband(self, buffer):
        # a true value keeps the buffer in the pickle; a false one sends it out of band, as a frame of its own
        return memoryview(buffer).nbytes < PACK_INBAND_BYTES or self.large.append(buffer)

    @property
    def value(self):
        if self._value is _UNPACKED:
            self._value = pickle.loads(self.header, buffers=self.large)
        return self._value

    def __reduce_ex__(self, protocol):
        if protocol >= 5:
            return _unpack, (self.header, *self.large)
        # Dask's scheduler pickles with protocol 4 (a call it proxies to a worker's actor, when the client
        # does not reach the workers directly), which cannot hold a PickleBuffer: the large arrays then
        # go inside the pickle, copied (writable, as a frame received from a comm would be)
        return _unpack, (self.header, *(bytearray(memoryview(b)) for b in self.large))


_UNPACKED = object()


def _unpack(header, *large):
    packed = Packed.__new__(Packed)
    packed.header, packed.large, packed._value = header, list(large), _UNPACKED
    return packed


def sendable_error(exc):
    """``exc``, or a RuntimeError naming it where it cannot be pickled.

    Dask sends an actor call's exception back pickled; one that cannot be
    (it holds a lock, a context variable) is only logged, and the driver
    would wait for the reply for ever.
    """
    try:
        pickle.dumps(exc)
        return exc
    except Exception:
        text = "".join(traceback.format_exception(exc)).rstrip()
        return RuntimeError(f"A TAO chunk host op failed with an error that cannot be sent back:\n{text}")


def pick(value, item):
    """``value[item]`` of a result (see :class:`Ref`): the whole value if ``item`` is None, pieces for a :class:`Select`."""
    if item is None:
        return value
    if isinstance(item, Select):
        picked = ((i, {k: parts[k] for k in item.keys if k in parts}) for i, parts in sorted(value.items()))
        return [(i, p) for i, p in picked if p]
    return value[item]


def walk(obj):
    """The leaves of ``obj``: the items of its (nested) lists and tuples, or ``obj`` itself."""
    if isinstance(obj, (list, tuple)):
        for item in obj:
            yield from walk(item)
    else:
        yield obj


def refs_in(obj):
    """Every :class:`Ref` among the leaves of ``obj`` (see :func:`walk`), in order."""
    return [a for a in walk(obj) if isinstance(a, Ref)]


def substitute(obj, values):
    """``obj`` with each :class:`Ref` replaced by ``values[id(ref)]`` where there is one (lists and tuples rebuilt)."""
    if isinstance(obj, Ref):
        return values.get(id(obj), obj)
    if isinstance(obj, list):
        return [substitute(o, values) for o in obj]
    if isinstance(obj, tuple):
        return tuple(substitute(o, values) for o in obj)
    return obj
