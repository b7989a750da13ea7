/* log.h: the contract of common/log.c, what tensorgc does with an exception it must not raise
 * (inside the collector's callback, a repr or a predicate of the user's, an observer): logged
 * on logger "tensorgc" with its traceback, sys.unraisablehook when logging itself fails, and a
 * KeyboardInterrupt never swallowed but handed back to the program. Shared by every subsystem;
 * the state it needs (the logger, where a held interrupt goes) is the caller's. Python.h comes
 * first; everything here needs the GIL. */
#ifndef TENSORGC_LOG_H
#define TENSORGC_LOG_H

/* When the pending exception is a KeyboardInterrupt (Python code we ran got the program's Ctrl-C:
 * the eval loop runs the SIGINT handler there), clears it and gives the interrupt back to the
 * program: now (PyErr_SetInterrupt) when held is NULL, else by setting *held, for a caller that
 * must not raise yet (inside the collector's callback) to give back later. 1; else 0, the
 * exception left as it was. */
int tgc_log_keep_interrupt(int *held);

/* Logs the pending exception, if any, as "tensorgc: <what> raised" on *logger with its
 * traceback, and clears it. *logger is logging.getLogger("tensorgc"), made on the first call
 * (not while the interpreter finalizes) and kept there: a new reference the caller releases.
 * When logging fails or is gone, the exception goes to sys.unraisablehook instead. A
 * KeyboardInterrupt is not logged: tgc_log_keep_interrupt(held) takes it. Never raises. */
void tgc_log_exception(PyObject **logger, int *held, const char *what);

#endif /* TENSORGC_LOG_H */
