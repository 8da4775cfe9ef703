"""Reading a decoding trace (`output_trace=True`): what each step did."""

from tests.helpers import MASK


def remask_slots(rec):
    """BoolTensor `[B, S]`: written slots the step turned back into masks."""
    return rec.edit & (rec.after == MASK) & ~rec.masked
