"""The communicator bridge shared by deep_ep.Buffer and deep_gemm.mega: an mpi4py communicator
(upstream's `comm=`, or passed where a group goes) or a torch.distributed group under mpirun,
mapped to the C MPI_Comm handle the library takes."""
from . import C


def _mpi_comm_of_group(fn, group):
    """The MPI communicator of a torch.distributed group under mpirun (same ranks, same order)."""
    import torch.distributed as dist
    try:
        from mpi4py import MPI
    except ImportError as e:
        raise NotImplementedError(f'{fn} with a torch.distributed group needs mpi4py in tilestack '
                                  '(the group is mapped to an MPI communicator of the same ranks)') from e
    world = MPI.COMM_WORLD
    if dist.get_world_size() != world.Get_size() or dist.get_rank() != world.Get_rank():
        raise C.ValueError(
            f'{fn}: torch.distributed world (rank {dist.get_rank()} of {dist.get_world_size()}) is not '
            f'the MPI world (rank {world.Get_rank()} of {world.Get_size()}): start the processes with mpirun and '
            'init_process_group with rank = MPI rank')
    ranks = dist.get_process_group_ranks(group)
    if list(ranks) == list(range(world.Get_size())):
        return world, None
    sub = world.Create_group(world.Get_group().Incl(list(ranks)))
    return sub, sub


def resolve_comm(fn, group, comm):
    """-> (comm, owned, handle, group): the mpi4py communicator, the one this call created
    (the caller frees it when done, else None), its C handle as an int, and the torch group
    (None when an mpi4py communicator came in `group`'s place)."""
    owned = None
    if group is not None and comm is None and hasattr(group, 'Get_rank') and hasattr(group, 'Dup'):
        comm, group = group, None  # an mpi4py communicator passed positionally
    if group is not None:
        comm, owned = _mpi_comm_of_group(fn, group)
    elif comm is None:
        raise C.ValueError(f"{fn}: either 'group' or 'comm' must be provided")
    try:
        from mpi4py import MPI
        handle = MPI._handleof(comm)
    except ImportError as e:
        raise NotImplementedError(f'{fn}: comm= needs mpi4py') from e
    except Exception as e:
        raise C.TypeError(f"{fn}: argument 'comm' must be an mpi4py.MPI.Comm, got {type(comm).__name__}") from e
    return comm, owned, handle, group


class BufferLifetime:
    """destroy() / __del__ of a communication buffer: the C capsule `_cap` (freed by
    C.<_c_destroy>) and the communicator the buffer may have made (`_owned_comm`). A class sets
    _c_destroy and _api (its name in messages)."""
    _c_destroy, _api = '', ''

    def destroy(self):
        assert self.explicitly_destroy, '`explicitly_destroy` flag must be set'
        self._destroy()

    def _destroy(self):
        if self._cap is not None:
            cap, self._cap = self._cap, None
            getattr(C, self._c_destroy)(cap)
        if getattr(self, '_owned_comm', None) is not None:
            self._owned_comm.Free()
            self._owned_comm = None

    def __del__(self):
        try:
            if getattr(self, '_cap', None) is not None and not self.explicitly_destroy:
                self._destroy()
        except Exception:
            pass

    def _buf(self, fn):
        if self._cap is None:
            raise RuntimeError(f'{self._api}.{fn}: the buffer was destroyed')
        return self._cap
