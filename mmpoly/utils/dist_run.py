"""``python -m mmpoly.utils.dist_run [torchrun options] SCRIPT [args]``: torchrun
(``torch.distributed.run``, unchanged) whose report of a failed job is one line.

The processes report their own errors (``tools/train.py`` and ``tools/test.py`` print a start-up
mistake once, on rank 0). torchrun then adds its own traceback and a failure table, about 35
lines that name no cause and bury the message. Here a failed job ends with one line naming the
failed ranks with their exit codes or signals (and the error file's message where a process
wrote one), and the exit status of the first failure (128 + N for signal N).

A master port that is in use (``EADDRINUSE``: another job, or one that has not ended yet, holds
it) fails before any process starts, in torchrun's rendezvous: one line names the port and how
to choose another (``PORT`` of ``tools/dist_train.sh`` / ``tools/dist_test.sh``, torchrun's
``--master-port``), exit status 1. Other network errors of the rendezvous are one line too.
"""
import re
import sys

__all__ = ['main', 'network_error_line']

#: What the launch scripts and torchrun take to choose the master port.
PORT_HINT = ('choose a free port: PORT=N tools/dist_train.sh ... (also tools/dist_test.sh), or '
             '--master-port N (the MASTER_PORT of the processes) for torchrun itself')


def network_error_line(error: BaseException, argv: list) -> str:
    """The one line that reports torchrun's rendezvous ``DistNetworkError`` ``error``;
    ``argv`` (torchrun's arguments) gives the port when the message does not."""
    message = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
    found = re.search(r'port: (\d+)', message)
    port = found.group(1) if found else _argv_port(argv)
    if 'EADDRINUSE' in message or 'address already in use' in message.lower():
        return (f'torchrun: master port {port} is in use on this machine (EADDRINUSE: another '
                f'job holds it, or one that has not ended yet); {PORT_HINT}')
    return (f'torchrun: the rendezvous at master port {port} failed: {message}; check '
            f'MASTER_ADDR and PORT (tools/dist_train.sh, tools/dist_test.sh), or {PORT_HINT}')


def _argv_port(argv: list) -> str:
    """The ``--master-port`` / ``--master_port`` of torchrun's ``argv``, else its default."""
    for i, arg in enumerate(argv):
        for flag in ('--master-port', '--master_port'):
            if arg.startswith(flag + '='):
                return arg.split('=', 1)[1]
            if arg == flag and i + 1 < len(argv):
                return argv[i + 1]
    return '29500'


def main() -> None:
    """Run torchrun with ``sys.argv[1:]``; exit with the first failure's status."""
    from torch.distributed import DistNetworkError
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError
    from torch.distributed.run import main as torchrun
    try:
        torchrun()
    except ChildFailedError as error:
        rank, first = error.get_first_failure()
        failed = ', '.join(
            f'rank {r} ' + (f'(signal {f.signal_name()})' if f.exitcode < 0 else
                            f'(exit code {f.exitcode})')
            for r, f in sorted(error.failures.items()))
        detail = f': {first.message}' if first.error_file != '<N/A>' and first.message else ''
        print(f'torchrun: {error.name} failed in {failed}; first: rank {rank}{detail}',
              file=sys.stderr, flush=True)
        sys.exit(first.exitcode if first.exitcode > 0 else 128 - first.exitcode)
    except DistNetworkError as error:  # the rendezvous, before any process started
        print(network_error_line(error, sys.argv[1:]), file=sys.stderr, flush=True)
        sys.exit(1)


if __name__ == '__main__':
    main()
