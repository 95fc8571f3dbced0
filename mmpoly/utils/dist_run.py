"""``python -m mmpoly.utils.dist_run [torchrun options] SCRIPT [args]``: torchrun
(``torch.distributed.run``, unchanged) whose report of a failed job is one line.

The processes report their own errors (``tools/train.py`` and ``tools/test.py`` print a start-up
mistake once, on rank 0). torchrun then adds its own traceback and a failure table, about 35
lines that name no cause and bury the message. Here a failed job ends with one line naming the
failed ranks with their exit codes or signals (and the error file's message where a process
wrote one), and the exit status of the first failure (128 + N for signal N).
"""
import sys

__all__ = ['main']


def main() -> None:
    """Run torchrun with ``sys.argv[1:]``; exit with the first failure's status."""
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


if __name__ == '__main__':
    main()
