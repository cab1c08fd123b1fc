"""``ZerobusReadbackTrigger``: the read-back wait, run by the triggerer."""
