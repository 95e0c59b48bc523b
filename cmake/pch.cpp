// Anchor translation unit for the shared precompiled header. See Note [Precompiled headers].
