"""Text analysis: the analyser, chunking, stemming, stop words."""
