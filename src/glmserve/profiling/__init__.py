"""``glmserve profile``: read torch-profiler Chrome traces and say where the decode step goes.

One module per stage, import them directly:

    trace       stream a trace .json/.json.gz event by event; refuse hostile files
    tracefiles  which files of a directory are one capture, and the rank of each
    events      what an event's fields mean, whichever exporter wrote it
    accumulate  one rank's events -> RankProfile (steps, kernel -> op attribution)
    labels      short kernel names, dtype casts, kernel kinds
    spans       nesting, overlap and shares of time spans
    results     RankProfile, KernelStat, OpStat, TraceAnalysis (the --json shapes)
    findings    per-rank shares -> Finding (advice), e.g. the whole-pool FP8 -> BF16 cast
    analysis    files -> TraceAnalysis, and the summary the run store keeps
    capture     record a trace on a live run through SGLang's /start_profile, under load
"""
