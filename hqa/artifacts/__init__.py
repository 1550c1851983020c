"""The run-time side of compiled programs: save and load artifact folders (:mod:`.store`: manifest, checksums,
migrations of older formats and names), the per-question demo selecting program (:mod:`.dpp_program`, with its
selection math in :mod:`.dpp`) and the MLflow pyfunc (:mod:`.pyfunc`).  Answering a question needs only this
package; :mod:`hqa.optimize` (compiling, comparing, tracking) writes what it reads."""
