// An OpenBLAS that answers "Prescott" to openblas_get_corename(), preloaded (LD_PRELOAD) by the
// launcher's test: OpenBLAS's fallback for a CPU model it does not know, on whatever CPU runs it.
extern "C" const char* openblas_get_corename() { return "Prescott"; }
