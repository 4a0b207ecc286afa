// Package audio reads what the gateway needs from uploaded audio files and
// converts the audio the engines produce.
//
// Sniff and Probe are header readers written for the gateway's hot path:
// they stream the file through a small fixed buffer, trust nothing they
// read, and never decode audio. Decode, Resample, EncodeWAV and ToSpeechWAV
// work on samples, for the workers' engines. SRT and VTT render transcripts
// as subtitles.
//
// Every function takes readers, writers or slices from its caller and does
// no other I/O. None of them panics on any input: damaged content yields a
// *FormatError, content of another kind ErrUnsupported.
package audio
